"""The engine's command line: ``memory-studio prompt|threads|reindex|models|traces|migrate|demo|serve``.

Every command takes ``--db``. Bad arguments and missing threads give one line on stderr and a
non-zero exit; nothing here opens a window (the Studio's entry point dispatches to this module).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import Sequence, TextIO

from core.memory import Memory, ThreadOwnershipError
from core.messages import Message
from core.options import MemoryOptions, OptionsError
from core.prompt import AssembledPrompt
from core.storage import StorageError, open_store
from core.storage.paths import DatabaseLocationError

COMMANDS = ("prompt", "threads", "reindex", "models", "traces", "migrate", "demo", "serve")


class CliError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too; keep it short)
        raise CliError(f"{self.prog}: {message}")


def build_parser(prog: str = "memory-studio") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Memory Studio: inspect and fix what an agent remembers.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    def db_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", help="database path (default: $MEMORY_STUDIO_DB, else <project>/.temp/memory.db)")

    p = sub.add_parser("prompt", help="print the prompt the engine would send for a new user message")
    db_arg(p)
    p.add_argument("--resource", required=True, help="resource (user) id")
    p.add_argument("--thread", required=True, help="thread id")
    p.add_argument("message", help="the new user message")
    p.add_argument("--instructions", default="", help="agent instructions (system message)")
    p.add_argument("--last-messages", type=int, default=None, help="history size (0 disables)")
    p.add_argument("--working-memory", choices=("off", "resource", "thread"), default=None,
                   help="show working memory in this scope (default: the registered agent's setting, else off)")
    p.add_argument("--read-only", action="store_true", help="assemble as a read-only turn")
    p.add_argument("--agent", default=None,
                   help="use the memory configuration this agent registered (default: the thread's last agent)")
    p.add_argument("--no-recall", action="store_true", help="leave semantic recall out (skips loading the model)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("threads", help="list threads")
    db_arg(p)
    p.add_argument("--resource", default=None, help="only this resource's threads")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("reindex", help="embed every message not yet in the recall index")
    db_arg(p)
    p.add_argument("--resource", default=None)

    p = sub.add_parser("models", help="install or check the local embedding model")
    p.add_argument("action", choices=("install", "status"))
    p.add_argument("--force", action="store_true")

    p = sub.add_parser("traces", help="manage the trace store")
    db_arg(p)
    p.add_argument("action", choices=("prune",))
    p.add_argument("--keep-days", type=float, default=None)
    p.add_argument("--keep-mb", type=float, default=None)

    p = sub.add_parser("migrate", help="apply pending schema migrations (needed once for a Mastra database)")
    db_arg(p)
    p.add_argument("--list", action="store_true", help="only list what is pending")

    p = sub.add_parser("demo", help="seed demo data by running the engine with a scripted model")
    db_arg(p)

    from core.gateway.cli import add_serve_parser

    add_serve_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        if not args.command:
            parser.print_help(out)
            return 2
        return int(_dispatch(args, out, err) or 0)
    except CliError as exc:
        print(str(exc), file=err)
        return 2
    except (StorageError, DatabaseLocationError, OptionsError, ThreadOwnershipError, LookupError, ValueError,
            RuntimeError) as exc:  # our errors carry a message that says what to do; no traceback
        print(f"error: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130


def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cmd = args.command
    if cmd == "models":
        from core.embedding.provision import main as provision_main

        with redirect_stdout(out), redirect_stderr(err):
            return int(provision_main([args.action, *(["--force"] if args.force else [])]))
    if cmd == "prompt":
        return _prompt(args, out)
    if cmd == "threads":
        return _threads(args, out)
    if cmd == "migrate":
        return _migrate(args, out)
    if cmd == "reindex":
        return _reindex(args, out, err)
    if cmd == "traces":
        from core.traces.store import prune_main

        from core.storage import retention_from_env

        with open_store(args.db, read_only=True, create=False) as store:
            path = store.location.observability_path
        if path is None or not path.exists():
            out.write(f"no trace file yet ({path}); nothing to prune\n")
            return 0
        keep_days, keep_mb = args.keep_days, args.keep_mb
        if keep_days is None and keep_mb is None:  # the configured retention (30 days / 1 GB by default)
            settings = retention_from_env()
            keep_days, keep_mb = settings.keep_days, settings.keep_mb
        extra = ["--keep-days", str(keep_days)] if keep_days is not None else []
        extra += ["--keep-mb", str(keep_mb)] if keep_mb is not None else []
        if not extra:
            out.write("retention is off (MEMORY_STUDIO_TRACES_KEEP_DAYS/MB); give --keep-days or --keep-mb\n")
            return 0
        with redirect_stdout(out), redirect_stderr(err):
            return int(prune_main(["--db", str(path), *extra]))
    if cmd == "serve":
        from core.gateway.cli import run_serve

        return run_serve(args, out, err)
    if cmd == "demo":
        from core.demo import seed_demo

        with open_store(args.db) as store:
            report = seed_demo(store)
        print(report.summary(), file=out)
        return 0
    raise CliError(f"unknown command {cmd}")


def _prompt(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.db, read_only=True, create=False) as store:
        thread = store.memory.get_thread(args.thread)
        if thread is None:
            raise LookupError(f"Thread {args.thread!r} not found in {store.location.display}.")
        from core.registry import options_for_thread

        options, agent_name = options_for_thread(store, args.thread, args.agent)
        embedder = None
        recall = options.get("semantic_recall")
        if isinstance(recall, dict) and recall.get("enabled") and not args.no_recall:
            from core.embedding import EmbedderError, default_embedder

            try:
                embedder = default_embedder()
            except EmbedderError as exc:
                options["semantic_recall"] = False
                print(f"note: semantic recall left out of this preview: {exc}", file=sys.stderr)
        elif args.no_recall:
            options["semantic_recall"] = False
        if args.last_messages is not None:
            if args.last_messages < 0:
                raise CliError("--last-messages must be 0 or more")
            options["last_messages"] = args.last_messages
        if args.working_memory == "off":
            options["working_memory"] = {"enabled": False}
        elif args.working_memory:
            wm = dict(options.get("working_memory") or {})
            wm.update({"enabled": True, "scope": args.working_memory})
            options["working_memory"] = wm
        if args.read_only:
            options["read_only"] = True
        memory = Memory(store, MemoryOptions(**options), name=agent_name or "default", embedder=embedder)
        prompt = memory.assemble(thread_id=args.thread, resource_id=args.resource,
                                 input=[Message.user(args.message)], instructions=args.instructions or None)
    if args.json:
        out.write(prompt.to_json() + "\n")
    else:
        out.write(render_prompt(prompt) + "\n")
    return 0


def render_prompt(prompt: AssembledPrompt) -> str:
    lines = [
        f"Prompt for thread {prompt.thread_id} (resource {prompt.resource_id})",
        f"{len(prompt.messages)} messages, {prompt.total_tokens} tokens ({prompt.tokenizer}) "
        f"of a {prompt.context_window:,}-token window",
        "",
    ]
    for f in prompt.fragments:
        where = f.source + (f" score={f.score:.3f}" if f.score is not None else "")
        ids = f" from {', '.join(f.stored_ids[:3])}{'…' if len(f.stored_ids) > 3 else ''}" if f.stored_ids else ""
        lines.append(f"── [{f.index}] {f.role} · {where} · {f.tokens} tok{ids}")
        body = f.text if f.kind != "tools" else ", ".join(f.detail.get("names", []))
        lines.extend("   " + line for line in body.splitlines() or [""])
    if prompt.skipped:
        lines.append("")
        lines.append("Processors that added nothing:")
        lines.extend(f"  {pid}: {why}" for pid, why in prompt.skipped.items())
    by_source = prompt.tokens_by_source()
    lines.append("")
    lines.append("Tokens by source: " + ", ".join(f"{k} {v}" for k, v in by_source.items()))
    return "\n".join(lines)


def _threads(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.db, read_only=True, create=False) as store:
        rows = store.memory.thread_summaries(args.resource)
    if args.json:
        out.write(json.dumps([{**s.thread.to_dict(), "messageCount": s.message_count,
                               "lastActivity": s.last_activity.isoformat() if s.last_activity else None}
                              for s in rows], ensure_ascii=False, indent=2) + "\n")
        return 0
    if not rows:
        out.write("no threads" + (f" for resource {args.resource}" if args.resource else "") + "\n")
        return 0
    out.write(f"{'THREAD':<28} {'RESOURCE':<20} {'MSGS':>6}  {'LAST ACTIVITY':<20} TITLE\n")
    for s in rows:
        last = s.last_activity.strftime("%Y-%m-%d %H:%M") if s.last_activity else "-"
        out.write(f"{s.thread.id:<28} {s.thread.resource_id:<20} {s.message_count:>6}  {last:<20} {s.thread.title}\n")
    return 0


def _migrate(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.db, read_only=args.list, create=False) as store:
        pending = store.pending_migrations()
        if args.list or not pending:
            out.write("\n".join(pending) + "\n" if pending else "nothing pending\n")
            return 0
        done = store.migrate()
    out.write("applied: " + ", ".join(done) + "\n")
    return 0


def _reindex(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.embedding import default_embedder
    from core.recall import reindex

    with open_store(args.db, create=False) as store:
        embedder = default_embedder()

        def progress(done: int, total: int) -> None:
            width = 30
            filled = int(width * done / total) if total else width
            err.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            err.flush()

        report = reindex(store, embedder, resource_id=args.resource, progress=progress)
        err.write("\n")
    out.write(f"{report}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
