"""``memory-studio mcp --resource ID [--http] [--agent NAME] [--db PATH]``: memory for any MCP client.

stdio by default (the client starts this command and talks over its stdin/stdout, so nothing but
the protocol is ever written to stdout; notes go to stderr). ``--http`` serves streamable HTTP at
``http://HOST:PORT/mcp`` under the gateway's rules (Host, Origin, token, body size; the same flags as
``memory-studio serve``). ``--any-resource`` lets each call name its resource, and is refused unless
a token is set (``--token`` or ``$MEMORY_STUDIO_MCP_TOKEN``, or over HTTP a tokens file,
``--tokens-file`` or ``$MEMORY_STUDIO_MCP_TOKENS_FILE``, whose tokens reach only their own resources):
over HTTP every request must carry one.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from typing import Any, TextIO

from core.errors import MemoryStudioError

#: Where ``memory-studio mcp`` reads its token when ``--token`` is not given.
TOKEN_ENV = "MEMORY_STUDIO_MCP_TOKEN"
#: Where it reads the path of its tokens file (per-resource tokens, over HTTP) when ``--tokens-file`` is not given.
TOKENS_FILE_ENV = "MEMORY_STUDIO_MCP_TOKENS_FILE"
DEFAULT_PORT = 8788
INSTALL_HINT = "pip install 'memory-studio[mcp]'"

log = logging.getLogger(__name__)


class McpExtraMissing(MemoryStudioError, RuntimeError):
    """``memory-studio mcp`` needs the official MCP SDK (the ``mcp`` extra)."""


def add_mcp_parser(sub: Any, db_arg: Any) -> None:
    from core.gateway.guard import add_guard_arguments

    p = sub.add_parser("mcp", help="serve this memory to MCP clients (desktop assistants, IDEs): stdio, or --http")
    db_arg(p)
    who = p.add_mutually_exclusive_group()
    who.add_argument("--resource", default=None, metavar="ID",
                     help="the one resource (user) whose memory is served; calls can never reach another's")
    who.add_argument("--any-resource", action="store_true",
                     help="let every call name its resource (needs a token: --token or $" + TOKEN_ENV +
                          ", or with --http a tokens file, whose tokens reach only their own resources)")
    p.add_argument("--agent", default=None,
                   help="use the memory configuration this registered agent recorded (working-memory template "
                        "or schema, recall); default: the only registered agent, else engine defaults")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --http: address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"with --http: port (default {DEFAULT_PORT}; 0 picks one)")
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    add_guard_arguments(p, token_env=TOKEN_ENV, tokens_file_env=TOKENS_FILE_ENV)


def require_mcp_extra() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise McpExtraMissing(f"memory-studio mcp needs the MCP Python SDK, which is not installed. "
                              f"Install it with: {INSTALL_HINT}")


def run_mcp(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Serve until the client goes away (stdio) or until interrupted (HTTP)."""
    import anyio

    from core.gateway.guard import policy_from_args, token_from_args
    from core.mcp_server.tools import Binding, MemoryTools
    from core.cli_store import open_cli_store
    from core.scopes import DELEGATION_PREFIX, is_delegation_resource

    require_mcp_extra()
    if not args.resource and not args.any_resource:
        raise ValueError("Say whose memory to serve: --resource ID (one user), or --any-resource with a token.")
    if args.resource and is_delegation_resource(args.resource):  # before the database is opened (or made)
        raise ValueError(f"--resource {args.resource!r}: resource ids starting with {DELEGATION_PREFIX!r} belong to "
                         "the agents' delegations (a sub-agent's memory of a resource's turns), which no MCP client "
                         "may read or write. Serve the user's own resource; look at a delegation in the Studio.")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}.")
    # Over stdio the token is only checked at start (it must be set for --any-resource), never sent in a
    # header, so only HTTP needs one an Authorization header can carry (policy_from_args checks that).
    if not args.http and args.tokens_file:
        raise ValueError("--tokens-file is for --http: over stdio there is no request to carry a token (the client "
                         "starts the server itself). Drop --tokens-file, or add --http.")
    policy = policy_from_args(args, token_env=TOKEN_ENV, tokens_file_env=TOKENS_FILE_ENV) if args.http else None
    token = policy.needs_token if policy is not None else bool(token_from_args(args, TOKEN_ENV)[0])
    if args.any_resource and not token:
        raise ValueError(f"--any-resource serves every user's memory, so it needs a token: set ${TOKEN_ENV} "
                         "(or --token); HTTP clients then send it as 'Authorization: Bearer <token>'. With --http, a "
                         f"tokens file (--tokens-file, ${TOKENS_FILE_ENV}) gives each user a token of their own.")
    logging.basicConfig(stream=err, level=args.log_level.upper(), format="memory-studio mcp: %(message)s")
    for warning in policy.tokens.warnings if policy is not None and policy.tokens is not None else ():
        err.write(f"memory-studio mcp: warning: {warning}\n")
    from core.mcp_server.server import build_server, http_app, run_stdio

    # A client's configuration holds the database's path: a typo there must not serve a new, empty memory
    # unnoticed (the client shows the server's stderr in a log at best).
    new_file = _check_new_database(args.db)
    # As every command opens it: another program's database is refused with what it is.
    with open_cli_store(args.db, create=True) as store:
        if new_file:
            err.write(f"memory-studio mcp: {store.location.display} did not exist: this is a new, empty database. "
                      "If you meant the Studio's, give its path (`memory-studio where` prints it).\n")
        memory = _memory(store, args.agent, err)
        tools = MemoryTools(memory, Binding(args.resource, args.any_resource))
        server = build_server(tools, log_level=args.log_level)
        who = f"resource {args.resource!r}" if args.resource else "any resource"
        try:
            if not args.http:
                err.write(f"memory-studio mcp: {store.location.display}, {who}"
                          f"{' (token required)' if args.any_resource else ''}, on stdio\n")
                err.flush()
                from core.gateway.server import exit_on_sigterm

                with exit_on_sigterm():  # a client stopping the server still gets its traces written
                    anyio.run(run_stdio, server)
                return 0
            from core.gateway.cli import is_loopback
            from core.gateway.server import serve

            assert policy is not None
            if not policy.needs_token and not is_loopback(args.host):
                err.write(f"memory-studio mcp: warning: serving on {args.host} without a token: anyone who can reach "
                          f"it can read and write the memory of {who}. Set ${TOKEN_ENV}.\n")

            def ready(url: str) -> None:
                err.write(f"memory-studio mcp: {store.location.display}, {who}, on {url}/mcp "
                          f"({'token required' if policy.needs_token else 'no token'})\n")
                err.flush()

            serve(http_app(server, policy), host=args.host, port=args.port, log_level=args.log_level,
                  on_ready=ready)
            return 0
        finally:
            memory.turn_tracer().flush(10)


def _check_new_database(db: str | None) -> bool:
    """Whether the database file to serve does not exist yet (it is then created). A path given with
    ``--db`` or ``$MEMORY_STUDIO_DB`` whose folder does not exist is refused: that is a typo, not a new
    memory (the default locations' folders are made)."""
    from core.storage.paths import resolve_db_path

    location = resolve_db_path(db)
    path = location.path  # (None: a server database, or an in-memory one)
    if path is None or path.exists():
        return False
    if location.how in ("explicit", "environment") and not path.parent.is_dir():
        given = "--db" if location.how == "explicit" else "$MEMORY_STUDIO_DB"
        raise ValueError(f"The folder {path.parent} does not exist, so {given} cannot name a database in it. Check "
                         "the path (`memory-studio where` prints the database the Studio opens), or create the "
                         "folder to start a new memory there.")
    return True


def _memory(store: Any, agent_name: str | None, err: TextIO) -> Any:
    """The memory the server works with: a registered agent's configuration (its template or schema
    and recall settings) or the engine's defaults with working memory on; recall when the local
    embedding model is installed."""
    from core.agent_configs import DEFAULT_MEMORY_NAME, list_agents, named_agent
    from core.embedding import EmbedderError
    from core.memory import Memory
    from core.options import MemoryOptions

    config = named_agent(store, agent_name) if agent_name else None
    if config is None:
        # The only agent of this database that registered itself. A registration an import wrote is not
        # taken up unnamed: a file's agent would otherwise set the template every client is asked to fill.
        agents = list_agents(store)
        own = [a for a in agents if not a.imported]
        config = own[0] if len(own) == 1 else None
        imported = [a.name for a in agents if a.imported]
        if imported:
            err.write(f"memory-studio mcp: not serving the memory configuration of {', '.join(map(repr, imported))} "
                      f"(registered by an import, not by an agent of this database); pass --agent NAME to serve "
                      f"one.\n")
        # Which settings the tools follow (a working-memory template, recall's scope), said once at start.
        if config is not None:
            err.write(f"memory-studio mcp: serving the memory configuration agent {config.name!r} registered (the "
                      "only one of this database).\n")
        elif len(own) > 1:
            err.write(f"memory-studio mcp: {len(own)} agents registered their memory configuration here "
                      f"({', '.join(repr(a.name) for a in own)}): serving the engine's defaults (working memory "
                      "on, no template); pass --agent NAME to serve one's.\n")
        else:
            err.write("memory-studio mcp: no agent registered its memory configuration here: serving the engine's "
                      "defaults (working memory on, no template).\n")
    options = config.memory_options() if config is not None else MemoryOptions(working_memory={"enabled": True})
    name = config.memory_name if config is not None else DEFAULT_MEMORY_NAME
    if not options.semantic_recall.enabled:
        options = options.merged({"semantic_recall": True})  # search_memory is the point of this server
    try:
        return Memory(store, options, name=name)
    except EmbedderError as exc:
        err.write(f"memory-studio mcp: search_memory will fail until the embedding model is installed: {exc}\n")
        return Memory(store, options.merged({"semantic_recall": False}), name=name)
