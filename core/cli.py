"""The engine's command line: ``memory-studio prompt|threads|reindex|models|traces|migrate|vacuum|where|demo|export|import|serve|mcp|test|forget``.

Every command takes ``--db``. Bad arguments and missing threads give one line on stderr and a
non-zero exit; nothing here opens a window (the Studio's entry point dispatches to this module).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence, TextIO

from core.cli_store import open_cli_store
from core.errors import MemoryStudioError
from core.transfer.commands import COMMANDS as TRANSFER_COMMANDS
from core.transfer.commands import add_parsers as add_transfer_parsers
from core.checks import cli as checks_cli
from core.edits import commands as edit_commands

if TYPE_CHECKING:  # pragma: no cover
    from core.prompt import AssembledPrompt

# What a command needs (SQLAlchemy, the memory, the transfer and check machinery, the gateway) is imported
# when that command runs, not here: building the parser costs every command, `where` and `--help` included,
# and importing it all took longer than most commands' own work. tests/core/test_cli_start.py holds the list.

COMMANDS = ("prompt", "threads", "reindex", "models", "traces", "migrate", "vacuum", "where", "demo", "serve",
            "mcp", "tokens", *TRANSFER_COMMANDS, *checks_cli.COMMANDS, *edit_commands.COMMANDS)


class CliError(MemoryStudioError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too; keep it short)
        raise CliError(f"{self.prog}: {message}")


def _finite(text: str) -> float:
    """A number a person gives (``inf`` and ``nan`` are floats to Python, not limits)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None  # argparse's own words
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"give a finite number (0 means no limit), not {text!r}")
    return value


# ``serve``'s and ``mcp``'s flags come from the gateway (``core.gateway.guard``), whose import loads the
# gateway's error mapping and with it most of the engine (half a second), ``tokens``' from its tokens files
# (asyncio): their parsers are filled in when they are the command being parsed. Their one-line helps are
# needed for ``memory-studio --help``; a test checks them against the gateway's and the MCP server's own.
SERVE_HELP = "serve agents over HTTP (OpenAI-compatible chat completions + memory API)"
MCP_HELP = "serve this memory to MCP clients (desktop assistants, IDEs): stdio, or --http"
TOKENS_HELP = "make API tokens that reach only some resources (the servers' --tokens-file)"


def _fill_serve(parser: argparse.ArgumentParser) -> None:
    from core.gateway.cli import add_serve_parser

    add_serve_parser(_ThisParser(parser))


def _fill_tokens(parser: argparse.ArgumentParser) -> None:
    from core.gateway.tokens_cli import add_tokens_parser

    add_tokens_parser(_ThisParser(parser))


def _fill_mcp(parser: argparse.ArgumentParser, db_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    from core.mcp_server.cli import add_mcp_parser

    add_mcp_parser(_ThisParser(parser), db_arg)


class _ThisParser:
    """Stands for a subparsers action whose ``add_parser`` hands back one parser made already."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return self.parser


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands some of whose parsers get their arguments only when they are the command parsed."""

    fill_later: dict[str, Callable[[argparse.ArgumentParser], None]]

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        fill = self.fill_later.pop(values[0], None) if values else None
        if fill is not None and values[0] in self.choices:
            fill(self.choices[values[0]])
        super().__call__(parser, namespace, values, option_string)


def build_parser(prog: str = "memory-studio") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Memory Studio: inspect and fix what an agent remembers.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, action=_Subcommands)
    assert isinstance(sub, _Subcommands)
    sub.fill_later = {}

    def db_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", help="database path (default: $MEMORY_STUDIO_DB, else <project>/.temp/memory.db; "
                                    "`memory-studio where` shows which)")

    p = sub.add_parser("prompt", help="print the prompt the engine would send for a new user message")
    db_arg(p)
    p.add_argument("--resource", required=True, help="resource (user) id")
    p.add_argument("--thread", required=True, help="thread id")
    p.add_argument("message", help="the new user message")
    p.add_argument("--instructions", default=None,
                   help="agent instructions (system message); default: those the agent recorded when it registered")
    p.add_argument("--last-messages", type=int, default=None, help="history size (0 disables)")
    p.add_argument("--working-memory", choices=("off", "resource", "thread"), default=None,
                   help="show working memory in this scope (default: the registered agent's setting, else off)")
    p.add_argument("--read-only", action="store_true", help="assemble as a read-only turn")
    p.add_argument("--agent", default=None,
                   help="use the memory configuration this agent registered (default: the thread's agent, "
                        "chosen as the Studio's prompt inspector does)")
    p.add_argument("--no-recall", action="store_true", help="leave semantic recall out (skips loading the model)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("threads", help="list threads")
    db_arg(p)
    p.add_argument("--resource", default=None, help="only this resource's threads")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("reindex", help="embed every message not yet in the recall index")
    db_arg(p)
    p.add_argument("--resource", default=None)
    p.add_argument("--model", default=None, metavar="NAME",
                   help="re-embed the whole database with this local model (use, e5) and then drop the "
                        "vectors of other models; without it, the model that indexed the database")
    p.add_argument("--pieces", choices=("on", "off", "default"), default=None,
                   help="piece vectors of long messages (vector-only search) for this model in this database: "
                        "on, off (drops them) or the model's default (on for use and e5); kept for later saves")

    p = sub.add_parser("models", help="install or check the local embedding model")
    p.add_argument("action", choices=("install", "status"), metavar="{install,status}")
    p.add_argument("--force", action="store_true", help="install: reinstall even if a verified model file is present")

    p = sub.add_parser("traces", help="manage the trace store")
    db_arg(p)
    p.add_argument("action", choices=("prune",), metavar="{prune}")
    p.add_argument("--keep-days", type=_finite, default=None, help="delete traces older than this (0: no age limit)")
    p.add_argument("--keep-mb", type=_finite, default=None, help="shrink the file to about this size (0: no size limit)")

    p = sub.add_parser("migrate", help="apply pending schema migrations (needed once for a Mastra database)")
    db_arg(p)
    p.add_argument("--list", action="store_true", help="only list what is pending")

    p = sub.add_parser("vacuum", help="give the space freed by deleted threads and messages back to the disk")
    db_arg(p)

    p = sub.add_parser("where", help="print which database file would be used, and why")
    db_arg(p)

    p = sub.add_parser("demo", help="seed demo data by running the engine with a scripted model")
    db_arg(p)
    add_transfer_parsers(sub, db_arg)
    checks_cli.add_parsers(sub, db_arg)
    edit_commands.add_parsers(sub, db_arg)

    sub.fill_later["serve"] = _fill_serve
    sub.add_parser("serve", help=SERVE_HELP)
    sub.fill_later["mcp"] = lambda p: _fill_mcp(p, db_arg)
    sub.add_parser("mcp", help=MCP_HELP)
    sub.fill_later["tokens"] = _fill_tokens
    sub.add_parser("tokens", help=TOKENS_HELP)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(list(argv) if argv is not None else None)
        if extra:
            raise CliError(_unrecognized(parser, args.command, extra))
        if not args.command:
            parser.print_help(out)
            return 2
        code = int(_dispatch(args, out, err) or 0)
        out.flush()  # here, so a reader that went away is noticed while we can still say so quietly
        return code
    except CliError as exc:
        print(str(exc), file=err)
        return 2
    except _expected_errors() as exc:  # our errors carry a message that says what to do; no traceback
        print(f"error: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a killed writer would
        _quiet_closed_stdout(out)
        return 141


def _expected_errors() -> tuple[type[BaseException], ...]:
    """The errors whose message is the whole report. Imported only when an error reaches ``main`` (an
    ``except`` clause's tuple is evaluated then), so a command does not load what it did not use."""
    from core.options import OptionsError
    from core.scopes import ThreadOwnershipError
    from core.storage import StorageError
    from core.storage.paths import DatabaseLocationError

    return (StorageError, DatabaseLocationError, OptionsError, ThreadOwnershipError, LookupError, ValueError,
            RuntimeError)


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: Sequence[str]) -> str:
    """argparse names the top program for an unknown flag of a command (``memory-studio: unrecognized
    arguments: --resourse ada``): say which command, the flag it most likely meant, and where its flags are."""
    import difflib

    prog = f"{parser.prog} {command}" if command else parser.prog
    message = f"{prog}: unrecognized arguments: {' '.join(extra)}"
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    known = list(sub.choices[command]._option_string_actions) if sub is not None and command in sub.choices else []
    for word in extra:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.7)
            if close:
                message += f" (did you mean {close[0]}?)"
                break
    return f"{message}. `{prog} --help` lists what it takes."


def _quiet_closed_stdout(out: TextIO) -> None:
    """After a broken pipe on standard output, point it at /dev/null: the interpreter flushes it once
    more at exit, and that flush would print a second error."""
    if out is not sys.stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor behind it (a test's stream)
        pass


def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cmd = args.command
    if cmd == "models":
        from core.embedding.provision import main as provision_main

        with redirect_stdout(out), redirect_stderr(err):
            return int(provision_main([args.action, *(["--force"] if args.force else [])]))
    if cmd == "prompt":
        return _prompt(args, out, err)
    if cmd in checks_cli.COMMANDS:
        return checks_cli.run(args, out, err)
    if cmd in edit_commands.COMMANDS:
        return edit_commands.run(args, out, err)
    if cmd in TRANSFER_COMMANDS:
        from core.transfer.commands import run as run_transfer

        _check_ids(args, ("thread", "resource"))

        return run_transfer(args, out, err)
    if cmd == "threads":
        return _threads(args, out)
    if cmd == "migrate":
        return _migrate(args, out)
    if cmd == "reindex":
        return _reindex(args, out, err)
    if cmd == "traces":
        from core.traces.home import retention_from_env, trace_home
        from core.traces.store import prune_main, retention_limit

        with open_cli_store(args.db, read_only=True) as store:
            home = trace_home(store.location)
        in_database = home.kind == "postgres"  # traces in the database's own table, not in a file
        path = store.location.observability_path
        if not in_database and (path is None or not path.exists()):
            out.write(f"no trace file yet ({path}); nothing to prune\n")
            return 0
        keep_days, keep_mb = args.keep_days, args.keep_mb
        if keep_days is None and keep_mb is None:  # the configured retention (30 days / 1 GB by default)
            settings = retention_from_env()
            keep_days, keep_mb = settings.keep_days, settings.keep_mb
        else:  # 0 means no limit, as in MEMORY_STUDIO_TRACES_KEEP_DAYS; a negative value would delete all
            try:
                keep_days = retention_limit(keep_days, "--keep-days")
                keep_mb = retention_limit(keep_mb, "--keep-mb")
            except ValueError as exc:
                raise CliError(f"memory-studio traces prune: {exc}") from None
        extra = ["--keep-days", str(keep_days)] if keep_days is not None else []
        extra += ["--keep-mb", str(keep_mb)] if keep_mb is not None else []
        if not extra:
            out.write("no limit to prune by (0 means no limit; retention may be off in "
                      "MEMORY_STUDIO_TRACES_KEEP_DAYS/MB); give --keep-days or --keep-mb\n")
            return 0
        if in_database:
            from core.traces.pg_store import PgSpanStore, prune_command

            with open_cli_store(args.db) as store:
                spans = store.observability
                assert isinstance(spans, PgSpanStore)
                return prune_command(spans, keep_days, keep_mb, out, err)
        with redirect_stdout(out), redirect_stderr(err):
            return int(prune_main(["--db", str(path), *extra]))
    if cmd == "vacuum":
        with open_cli_store(args.db) as store:
            reclaimed = store.vacuum(progress=edit_commands.vacuum_progress(err))
            out.write(f"{store.location.display}: reclaimed {reclaimed / 1e6:.2f} MB\n")
        return 0
    if cmd == "where":
        return _where(args, out)
    if cmd == "serve":
        from core.gateway.cli import run_serve

        return run_serve(args, out, err)
    if cmd == "mcp":
        from core.mcp_server.cli import run_mcp

        _check_ids(args, ("resource",))  # else it serves, and every tool call fails on the id

        return run_mcp(args, out, err)
    if cmd == "tokens":
        from core.gateway.tokens_cli import run_tokens

        return run_tokens(args, out, err)
    if cmd == "demo":
        return _demo(args, out)
    raise CliError(f"unknown command {cmd}")


def _prompt(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.agent_configs import DEFAULT_MEMORY_NAME, agent_for_thread, named_agent
    from core.ids import lone_surrogate
    from core.memory import Memory
    from core.messages import Message
    from core.options import MemoryOptions

    if args.last_messages is not None and args.last_messages < 0:
        raise CliError("--last-messages must be 0 or more")
    _check_ids(args, ("resource", "thread"))
    for flag in ("resource", "thread"):  # empty: no owner to check, so another user's thread would be shown
        if not getattr(args, flag):
            raise CliError(f"memory-studio prompt: --{flag} is empty; give the {'user' if flag == 'resource' else 'thread'}"
                           " id (`memory-studio threads` lists each thread with its resource).")
    for name, what in (("message", "the message"), ("instructions", "--instructions")):
        problem = lone_surrogate(getattr(args, name))  # bytes of argv that are not UTF-8 (surrogateescape)
        if problem is not None:
            raise CliError(f"memory-studio prompt: {what} holds {problem} (bytes that are not UTF-8 in the "
                           "argument): no model could be sent it, and --json could not show it. Pass UTF-8 text.")
    with open_cli_store(args.db, read_only=True) as store:
        thread = store.memory.get_thread(args.thread)
        if thread is None:
            raise LookupError(f"Thread {args.thread!r} not found in {store.location.display}. "
                              "List the threads with 'memory-studio threads'.")
        # The same rule as the Studio's prompt inspector, so both show the same prompt.
        choice = agent_for_thread(store, args.thread)
        agent, origin = choice.agent, choice.reason
        if args.agent:
            agent, origin = named_agent(store, args.agent), "chosen with --agent"
        options = agent.memory_options() if agent is not None else MemoryOptions()
        changes: dict[str, Any] = {}
        embedder = None
        if options.semantic_recall.enabled and not args.no_recall:
            from core.embedding import EmbedderError
            from core.recall.models import store_embedder

            try:
                embedder = store_embedder(store, shared=False)  # the model the database's vectors come from
            except EmbedderError as exc:
                changes["semantic_recall"] = False
                print(f"note: semantic recall left out of this preview: {exc}", file=err)
        elif args.no_recall:
            changes["semantic_recall"] = False
        if args.last_messages is not None:
            changes["last_messages"] = args.last_messages
        if args.working_memory == "off":
            changes["working_memory"] = {"enabled": False}
        elif args.working_memory:
            changes["working_memory"] = {"enabled": True, "scope": args.working_memory}
        if args.read_only:
            changes["read_only"] = True
        name = agent.memory_name if agent is not None else DEFAULT_MEMORY_NAME
        memory = Memory(store, options.merged(changes), name=name, embedder=embedder)
        # The agent's own instructions are part of what the model reads: use those it recorded.
        instructions = args.instructions if args.instructions is not None else (
            agent.instructions if agent is not None else None)
        prompt = memory.assemble(thread_id=args.thread, resource_id=args.resource,
                                 input=[Message.user(args.message)], instructions=instructions or None)
    if args.json:
        out.write(prompt.to_json() + "\n")
    else:
        where = f"agent '{agent.name}'" if agent is not None else "engine defaults"
        out.write(render_prompt(prompt, origin=f"{where} ({origin})") + "\n")
    return 0


def _check_ids(args: argparse.Namespace, names: Sequence[str]) -> None:
    """Refuse an id argument that cannot be an id (a NUL, bytes of argv that are not UTF-8) with the
    rule's own sentence, before a query would fail with the driver's words."""
    from core.ids import check_optional_id

    for name in names:
        value = getattr(args, name, None)
        if isinstance(value, str):
            check_optional_id(value, f"{name} id")


#: ``render_prompt``'s key to the lines that name a part of a message that is no text (``Fragment.part_notes``).
PART_NOTES_LEGEND = ("Lines marked + name a part that is no text (an image, a file, audio): the model was sent the "
                     "part itself, and its tokens are not counted.")


def render_prompt(prompt: AssembledPrompt, *, origin: str | None = None) -> str:
    from core.terminal_text import visible

    lines = [
        f"Prompt for thread {prompt.thread_id} (resource {prompt.resource_id})",
        f"{len(prompt.messages)} messages, {prompt.total_tokens} tokens ({prompt.tokenizer}) "
        f"of a {prompt.context_window:,}-token window",
        *([f"Options from {origin}"] if origin else []),
        *([PART_NOTES_LEGEND] if any(f.part_notes for f in prompt.fragments) else []),
        "",
    ]
    for f in prompt.fragments:
        where = f.source + (f" score={f.score:.3f}" if f.score is not None else "")
        ids = f" from {', '.join(f.stored_ids[:3])}{'…' if len(f.stored_ids) > 3 else ''}" if f.stored_ids else ""
        lines.append(f"── [{f.index}] {f.role} · {where} · {f.tokens} tok{ids}")
        if f.kind == "tools":
            lines.append("   " + ", ".join(f.detail.get("names", [])))
            continue
        notes, at = {start for start, _ in f.part_notes}, 0
        for line, ended in zip(f.text.splitlines() or [""], f.text.splitlines(keepends=True) or [""]):
            lines.append((" + " if at in notes else "   ") + line)  # (a typed line is always after three spaces)
            at += len(ended)
    if prompt.skipped:
        lines.append("")
        lines.append("Processors that added nothing:")
        lines.extend(f"  {pid}: {why}" for pid, why in prompt.skipped.items())
    by_source = prompt.tokens_by_source()
    lines.append("")
    lines.append("Tokens by source: " + ", ".join(f"{k} {v}" for k, v in by_source.items()))
    return visible("\n".join(lines), keep="\n\t")


def _threads(args: argparse.Namespace, out: TextIO) -> int:
    from core.ids import check_optional_id
    from core.stored_text import json_text
    from core.terminal_text import display_width, pad, visible

    check_optional_id(args.resource, "resource id")  # bytes that are not UTF-8 in argv become lone surrogates
    with open_cli_store(args.db, read_only=True) as store:
        rows = store.memory.thread_summaries(args.resource)
    if args.json:
        out.write(json_text([{**s.thread.to_dict(), "messageCount": s.message_count,
                               "lastActivity": s.last_activity.isoformat() if s.last_activity else None}
                              for s in rows], ensure_ascii=False, indent=2) + "\n")
        return 0
    if not rows:
        out.write("no threads" + (f" for resource {args.resource}" if args.resource is not None else "") + "\n")
        return 0
    # Padded by terminal columns, not characters: a CJK or emoji id takes two columns a character. A column
    # is as wide as its longest id (a delegation's `helper-<uuid>` on `delegation:alice:helper`), so every
    # row's count, date and title stay under their headings.
    ids = [(visible(s.thread.id), visible(s.thread.resource_id)) for s in rows]
    thread_w = max([28, *(display_width(t) for t, _ in ids)])
    resource_w = max([20, *(display_width(r) for _, r in ids)])
    out.write(f"{pad('THREAD', thread_w)} {pad('RESOURCE', resource_w)} {'MSGS':>6}  {'LAST ACTIVITY':<20} TITLE\n")
    for s, (thread_id, resource_id) in zip(rows, ids):
        last = s.last_activity.strftime("%Y-%m-%d %H:%M") if s.last_activity else "-"
        out.write(f"{pad(thread_id, thread_w)} {pad(resource_id, resource_w)} {s.message_count:>6}  "
                  f"{last:<20} {visible(s.thread.title)}\n")
    return 0


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    """Seed demo data into a new or empty database only: into one that holds conversations it would add
    every demo turn again (a second run doubles each thread) and mix demo users (``ada``, ``sam``) into
    real ones."""
    from core.demo import seed_demo

    with open_cli_store(args.db, create=True) as store:
        display = store.location.display
        resources = store.memory.list_resources()
        if resources:
            threads = sum(r.thread_count for r in resources)
            raise CliError(
                f"memory-studio demo: {display} already holds {len(resources)} resource(s) and {threads} thread(s); "
                "demo data goes into a new or empty database only. Give --db a file that does not exist yet."
            )
        report = seed_demo(store)
    print(report.summary(), file=out)
    return 0


def _where(args: argparse.Namespace, out: TextIO) -> int:
    """The file ``open_store`` resolves from here (the same rules, without opening it)."""
    from core.storage.paths import caller_file, resolve_db_path

    location = resolve_db_path(args.db, caller=caller_file() if not args.db else None)
    out.write(f"{location.display}\n")
    out.write(f"  why: {location.reason} ({location.how})\n")
    path = location.path
    if path is not None and path.is_dir():
        out.write("  exists: a folder, not a database file; choose a file inside it\n")
        return 0  # no database here, so no trace file beside one either
    elif path is not None:
        missing = "no (made by an agent's first turn, or by `memory-studio demo`)"
        out.write(f"  exists: {'yes, ' + format(path.stat().st_size, ',') + ' bytes' if path.exists() else missing}\n")
    from core.traces.home import trace_home
    from core.traces.spans import SPANS_TABLE

    home = trace_home(location)
    if home.kind == "duckdb":
        out.write(f"  traces: {home.display}\n")
    elif home.kind == "postgres":
        out.write(f"  traces: its {SPANS_TABLE} table\n")
    return 0


def _migrate(args: argparse.Namespace, out: TextIO) -> int:
    from core.storage import open_store

    # What is pending is read first, read-only: opening an empty file to write makes it a memory database
    # (every migration applied as it opens), which a later look would report as "nothing pending".
    with open_store(args.db, read_only=True, create=False) as store:
        pending = store.pending_migrations()
        if args.list or not pending:
            out.write("\n".join(pending) + "\n" if pending else "nothing pending\n")
            newer = store.db.unknown_migrations()
            if newer:  # "nothing pending" alone reads as "up to date"; writes will be refused
                out.write(f"written by a newer Memory Studio (migrations {', '.join(newer)}): it can be read, "
                          "but upgrade Memory Studio before writing to it\n")
            return 0
    with open_store(args.db, create=False) as store:
        store.migrate()
        left = set(store.pending_migrations())
    out.write("applied: " + ", ".join(name for name in pending if name not in left) + "\n")
    return 0


def _reindex(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.embedding import default_embedder, local_model
    from core.recall import reindex
    from core.recall.models import store_embedder

    if args.resource == "":  # it matched no message and said "Nothing new", as if all were indexed
        raise CliError("memory-studio reindex: --resource is empty; give a resource id, or leave it out to index "
                       "the whole database.")
    if args.model is not None:
        local_model(args.model)  # an unknown name fails before the database is opened
        if args.resource is not None:
            raise CliError("--model re-embeds the whole database; leave out --resource")
    with open_cli_store(args.db) as store:
        if args.model is not None:
            embedder = default_embedder(args.model)
        else:
            embedder = store_embedder(store, shared=False)

        # A bar redrawn in place on a terminal; piped or redirected, the finished bar alone (one line,
        # not a line of carriage returns per batch in a log file).
        live = bool(getattr(err, "isatty", lambda: False)())
        lead = "\r" if live else ""

        drawn = False

        def progress(done: int, total: int) -> None:
            nonlocal drawn
            if total == 0 or (not live and done < total):  # (nothing to embed: the summary says so, no bar)
                return
            drawn = True
            width = 30
            filled = int(width * done / total) if total else width
            err.write(f"{lead}[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            err.flush()

        report = reindex(store, embedder, resource_id=args.resource, progress=progress,
                         replace=args.model is not None, pieces=args.pieces)
        if drawn:
            err.write("\n")
    for line in report.summary_lines():
        out.write(line + "\n")
    if args.model is not None and report.failed:
        out.write("The other models' vectors were kept, so recall keeps working until every message has one "
                  f"from {report.model_id}.\n")
    return 1 if report.failed else 0  # a script (cron, CI) must tell a run that left messages out


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
