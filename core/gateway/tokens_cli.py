"""``memory-studio tokens new --name N --resource R [--resource R2 ...] [--file PATH]``, ``tokens hash``,
``tokens check PATH``: making the entries of a tokens file (``core.gateway.tokens``).

``new`` prints a fresh random token once (it is not kept anywhere: give it to its user) and the entry
holding its SHA-256; with ``--file`` it adds the entry to that file (created readable by its owner only).
``hash`` prints the entry's ``sha256`` for a token read from standard input (an existing secret).
``check`` reads a file as a server would at start and says what is wrong with it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from core.gateway.tokens import add_entry, entry_for, load_tokens_file, new_token, token_sha256


def add_tokens_parser(sub: Any) -> None:
    p = sub.add_parser("tokens", help="make API tokens that reach only some resources (the servers' --tokens-file)")
    actions = p.add_subparsers(dest="tokens_action", required=True, metavar="{new,hash,check}")
    new = actions.add_parser("new", help="make a random token; print it once and its tokens file entry")
    new.add_argument("--name", required=True, help="who uses it (an app, a user); traces and logs show this name")
    new.add_argument("--resource", action="append", required=True, metavar="ID",
                     help="a resource this token may use (repeatable); '*' for every resource")
    new.add_argument("--file", default=None, metavar="PATH",
                     help="add the entry to this tokens file (created when missing, readable by you only)")
    actions.add_parser("hash", help="print the sha256 entry value of a token read from standard input")
    check = actions.add_parser("check", help="read a tokens file as a server would, and say what is wrong")
    check.add_argument("path")


def run_tokens(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.tokens_action == "hash":
        given = sys.stdin.readline().strip()
        if not given:
            raise ValueError("Give the token on standard input, for example: printf %s \"$TOKEN\" | "
                             "memory-studio tokens hash")
        out.write(token_sha256(given) + "\n")
        return 0
    if args.tokens_action == "check":
        tokens = load_tokens_file(args.path)
        for warning in tokens.warnings:
            err.write(f"warning: {warning}\n")
        out.write(f"{args.path}: {len(tokens.entries)} token(s): "
                  + ", ".join(e.name for e in tokens.entries) + "\n")
        return 0
    token = new_token()
    entry = entry_for(args.name, args.resource, token)
    if args.file:
        add_entry(args.file, entry)
    out.write(f"token (shown once; give it to {args.name!r} and keep it out of the tokens file):\n  {token}\n")
    if args.file:
        out.write(f"added to {args.file}:\n")
    else:
        out.write('add this entry to the tokens file\'s "tokens" list:\n')
    out.write("  " + json.dumps(entry.to_json()) + "\n")
    out.write("Restart the server (memory-studio serve or mcp --http, with --tokens-file) to use it.\n")
    return 0
