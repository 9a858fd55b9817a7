"""``memory-studio serve --agents package.module:agents [--host] [--port] [--token] [--tokens-file PATH]``
``[--default-resource]
``[--allowed-host NAME]... [--allow-origin ORIGIN]... [--max-body-mb MB]``, or ``memory-studio serve
--model provider/model [--name] [--instructions] [--db] [--max-tokens] [--context-window] [--model-timeout]
[--self-hosted auto|yes|no]``: one
agent with a default memory, its model named as ``Agent(model=...)`` takes it (``core.llm.providers``)."""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any, TextIO

from core.gateway import TOKEN_ENV, TOKENS_FILE_ENV, require_serve_extra
from core.gateway.guard import add_guard_arguments, policy_from_args

DEFAULT_PORT = 8787


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve agents over HTTP (OpenAI-compatible chat completions + memory API)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--agents", metavar="MODULE:ATTR",
                       help="where the agents are: a dict of name → Agent, a list of agents, or a function "
                            "returning one (for example myapp.agents:agents)")
    which.add_argument("--model", metavar="PROVIDER/MODEL",
                       help="serve one agent with a default memory on this model, named as agents take it "
                            "(openai/gpt-4o-mini, ollama/llama3.1, groq/..., vllm/...; keys from the usual "
                            "variables, base URLs from <PROVIDER>_BASE_URL)")
    p.add_argument("--name", help="with --model: the agent's name, what clients send as 'model' (default assistant)")
    p.add_argument("--instructions", help="with --model: the agent's instructions (default: You are a helpful "
                                          "assistant.)")
    p.add_argument("--db", help="with --model: the memory database (default: $MEMORY_STUDIO_DB, else "
                                "<project>/.temp/memory.db)")
    p.add_argument("--max-tokens", type=int, metavar="N",
                   help="with --model: cap each reply at N tokens (the agent's model setting max_tokens; default: "
                        "none, the server's own limit). A small local model may otherwise write until its "
                        "context is full; clients' own sampling parameters are not used")
    p.add_argument("--context-window", type=int, metavar="N",
                   help="with --model: the server's context size in tokens (llama.cpp --ctx-size, vLLM "
                        "--max-model-len, Ollama num_ctx), so the agent drops the oldest memory to fit before "
                        "sending; without it a thread that has outgrown the server's context fails on every turn")
    p.add_argument("--model-timeout", type=float, metavar="SECONDS",
                   help="with --model: how long to wait for the model server's reply (default 60); a local model "
                        "on a CPU may need longer for a long reply")
    p.add_argument("--self-hosted", metavar="auto|yes|no",
                   help="with --model: whether the model server runs on your machine or network (yes: a turn whose "
                        "client leaves closes its connection, so llama.cpp or Ollama stops generating) or is a hosted "
                        "API (no: its reply is waited for, its tokens being paid for); default auto, decided from the "
                        "base URL (localhost, *.local, a private address or a name resolving to one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    add_guard_arguments(p, token_env=TOKEN_ENV, tokens_file_env=TOKENS_FILE_ENV)
    p.add_argument("--default-resource", default="default",
                   help="resource for requests that name none (no metadata.resource_id, x-resource-id or user); "
                        "a tokens file's token with one resource uses that one instead")
    p.add_argument("--max-concurrency", type=int, default=40, help="turns running at once (default 40)")
    p.add_argument("--stream-write-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="drop a streaming client that reads nothing for this long, releasing its turn's worker "
                        "(default 30)")
    p.add_argument("--idempotency-ttl", type=float, default=24 * 3600.0, metavar="SECONDS",
                   help="how long the outcome of a request sent with an Idempotency-Key header is kept, so a "
                        "client's retry with that key gets it instead of running again (default 86400, a day)")
    p.add_argument("--idempotency-lease", type=float, default=60.0, metavar="SECONDS",
                   help="how long a running request holds its Idempotency-Key without renewing it: after a "
                        "gateway process dies mid-request, a retry may run after this long (default 60)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))


def run_serve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    require_serve_extra()
    from core.gateway.app import check_settings, create_app
    from core.gateway.registry import load_agents
    from core.gateway.server import bind, serve
    from core.llm.yielding import parse_self_hosted

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}.")
    if args.agents:
        # The module's agents bring their own memory (its database), names and instructions: these flags
        # would be ignored without a word.
        given = [flag for flag, value in (("--db", args.db), ("--name", args.name),
                                          ("--instructions", args.instructions), ("--max-tokens", args.max_tokens),
                                          ("--context-window", args.context_window),
                                          ("--model-timeout", args.model_timeout),
                                          ("--self-hosted", args.self_hosted))
                 if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --model only: with "
                             "--agents, each agent runs with the memory, name, instructions and model settings its "
                             f"module gives it. Drop {' and '.join(given)}, or set them in {args.agents.split(':')[0]}.")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be a positive number of tokens, got {args.max_tokens}.")
    if args.context_window is not None and args.context_window < 1:
        raise ValueError(f"--context-window must be a positive number of tokens, got {args.context_window}.")
    if args.model_timeout is not None and not 0 < args.model_timeout < float("inf"):
        raise ValueError(f"--model-timeout must be a positive number of seconds, got {args.model_timeout:g}.")
    self_hosted = parse_self_hosted(args.self_hosted, what="--self-hosted") if args.self_hosted is not None else None
    check_settings(default_resource=args.default_resource, max_concurrency=args.max_concurrency,
                   stream_write_timeout=args.stream_write_timeout, flags=True)
    idempotency = idempotency_from_args(args)
    policy = policy_from_args(args, token_env=TOKEN_ENV, tokens_file_env=TOKENS_FILE_ENV)
    for warning in policy.tokens.warnings if policy.tokens is not None else ():
        err.write(f"warning: {warning}\n")
    sock = None
    try:
        if args.agents:  # the module's own code opens its database: a bad spec is said before the port is tried
            agents = load_agents(args.agents)
            sock = bind(args.host, args.port)
        else:  # the port first: one in use is refused before the database is opened (or made, for nothing)
            sock = bind(args.host, args.port)
            agents = model_agent(
                args.model, name=args.name if args.name is not None else "assistant",
                instructions=args.instructions if args.instructions is not None else "You are a helpful assistant.",
                db=args.db, max_tokens=args.max_tokens, context_window=args.context_window,
                timeout=args.model_timeout, self_hosted=self_hosted)
        app = create_app(agents, policy=policy, default_resource=args.default_resource,
                         max_concurrency=args.max_concurrency, stream_write_timeout=args.stream_write_timeout,
                         idempotency=idempotency)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    token = policy.needs_token
    if not token and not is_loopback(args.host):
        err.write(f"warning: serving on {args.host} without a token: anyone who can reach it can read and write "
                  f"every resource's memory. Set {TOKEN_ENV}, or give each user a token (--tokens-file).\n")

    def ready(url: str) -> None:
        auth = "no token" if not token else "token required" if policy.tokens is None else \
            f"token required, {len(policy.tokens.entries)} token(s) from {policy.tokens.path}"
        out.write(f"memory-studio gateway: {len(agents)} agent(s) ({', '.join(agents)}) on {url} ({auth})\n")
        out.flush()

    serve(app, host=args.host, port=args.port, log_level=args.log_level, on_ready=ready, sock=sock)
    return 0


def idempotency_from_args(args: argparse.Namespace) -> Any:
    """``--idempotency-ttl`` and ``--idempotency-lease`` as settings, checked before anything opens."""
    from core.gateway.idempotency import IdempotencySettings

    ttl, lease = args.idempotency_ttl, args.idempotency_lease
    for flag, value in (("--idempotency-ttl", ttl), ("--idempotency-lease", lease)):
        if not 0 < value < float("inf"):
            raise ValueError(f"{flag} must be a positive number of seconds, got {value}.")
    if lease > ttl:
        raise ValueError(f"--idempotency-lease ({lease:g}) must not be longer than --idempotency-ttl ({ttl:g}).")
    return IdempotencySettings(ttl=ttl, lease=lease)


def model_agent(model: str, *, name: str, instructions: str, db: str | None,
                max_tokens: int | None = None, context_window: int | None = None,
                timeout: float | None = None, self_hosted: bool | None = None) -> dict[str, Any]:
    """``--model``: one agent on the named model with a default memory (an unknown provider or a
    missing key is a ``ConfigurationError`` now, before the server starts); ``max_tokens`` caps its
    replies (``--max-tokens``), ``context_window`` is the server's context size, which the agent fits
    each prompt into (``--context-window``), ``timeout`` how long a model call may take (``--model-timeout``),
    ``self_hosted`` whether its server is self-hosted (``--self-hosted``; None: from the base URL)."""
    from core.agent import Agent
    from core.cli_store import open_cli_store
    from core.memory import Memory

    from core.llm.providers import resolve_model

    # An unknown provider or a missing key is refused before the database is opened: a misspelt name
    # left a new, empty database file behind.
    settings: dict[str, Any] = {key: value for key, value in (("context_window", context_window),
                                                               ("timeout", timeout),
                                                               ("self_hosted", self_hosted)) if value is not None}
    chat_model = resolve_model(model, what=f"model of agent {name!r}", **settings)
    # As every command opens it: another program's database is refused before the server starts (each
    # request failed with 500 on its first read of a table it does not have).
    try:
        store = open_cli_store(db, create=True)
    except BaseException:
        chat_model.close()
        raise
    agent = Agent(name, instructions=instructions, model=chat_model, memory=Memory(store),
                  model_settings={"max_tokens": max_tokens} if max_tokens is not None else None)
    return {name: agent}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
