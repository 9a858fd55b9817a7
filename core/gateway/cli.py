"""``memory-studio serve --agents package.module:agents [--host] [--port] [--token] [--tokens-file PATH]``
``[--default-resource]
``[--allowed-host NAME]... [--allow-origin ORIGIN]... [--max-body-mb MB]``, or ``memory-studio serve
--model provider/model [--name] [--instructions] [--db] [--max-tokens] [--context-window] [--model-timeout]
[--self-hosted auto|yes|no]`` and the memory flags (``--last-messages``, ``--working-memory`` with its template or
schema file, ``--semantic-recall`` with its top-k and range, ``--observational-memory`` with its thresholds and
model): one agent with a memory built from them (by default the last 10 messages only), its model named as
``Agent(model=...)`` takes it (``core.llm.providers``)."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Mapping
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
    add_memory_arguments(p)
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
                        "gateway process on another host dies mid-request, a retry may run after this long (one on "
                        "this host is taken over at once) (default 60)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))


#: The flags of the memory of the ``--model`` agent, as (flag, argparse dest).
MEMORY_FLAGS = (("--last-messages", "last_messages"), ("--working-memory", "working_memory"),
                ("--working-memory-template", "working_memory_template"),
                ("--working-memory-schema", "working_memory_schema"), ("--semantic-recall", "semantic_recall"),
                ("--semantic-recall-top-k", "semantic_recall_top_k"),
                ("--semantic-recall-range", "semantic_recall_range"),
                ("--observational-memory", "observational_memory"), ("--om-message-tokens", "om_message_tokens"),
                ("--om-observation-tokens", "om_observation_tokens"),
                ("--om-max-output-tokens", "om_max_output_tokens"), ("--om-model", "om_model"))
#: Every flag that goes with ``--model`` only (refused with ``--agents``, whose module says all of it).
MODEL_ONLY_FLAGS = (("--db", "db"), ("--name", "name"), ("--instructions", "instructions"),
                    ("--max-tokens", "max_tokens"), ("--context-window", "context_window"),
                    ("--model-timeout", "model_timeout"), ("--self-hosted", "self_hosted"), *MEMORY_FLAGS)


def add_memory_arguments(p: Any) -> None:
    """The memory of the ``--model`` agent, named after ``MemoryOptions`` (see the README's memory section)."""
    g = p.add_argument_group(
        "memory of the --model agent (MemoryOptions; default: the last 10 messages of the thread, nothing else)")
    g.add_argument("--last-messages", type=int, metavar="N",
                   help="with --model: how many of the thread's newest messages join each prompt (last_messages; "
                        "default 10, 0 none)")
    g.add_argument("--working-memory", nargs="?", const="resource", choices=("resource", "thread"),
                   metavar="resource|thread",
                   help="with --model: keep a working memory the model updates with a tool and reads in every prompt "
                        "(working_memory), per user (resource, the default) or per thread; its template is the "
                        "built-in one unless --working-memory-template or --working-memory-schema gives one")
    g.add_argument("--working-memory-template", metavar="FILE",
                   help="with --working-memory: a Markdown file, the template the model fills in (working_memory "
                        "template; each update replaces the whole text)")
    g.add_argument("--working-memory-schema", metavar="FILE",
                   help="with --working-memory: a JSON Schema file (an object's properties) instead of a template "
                        "(working_memory schema; each update is merged into the stored object)")
    g.add_argument("--semantic-recall", nargs="?", const="resource", choices=("resource", "thread"),
                   metavar="resource|thread",
                   help="with --model: add older messages like the new one to each prompt (semantic_recall; hybrid "
                        "keyword and vector search with the local embedding model), from all the user's threads "
                        "(resource, the default) or this thread only")
    g.add_argument("--semantic-recall-top-k", type=int, metavar="N",
                   help="with --semantic-recall: messages found per turn (top_k; default 4)")
    g.add_argument("--semantic-recall-range", type=int, metavar="N",
                   help="with --semantic-recall: neighbours added before and after each one found (message_range; "
                        "default 1)")
    g.add_argument("--observational-memory", nargs="?", const="thread", choices=("thread", "resource"),
                   metavar="thread|resource",
                   help="with --model: observational memory instead of the message history (observational_memory): "
                        "an observer model condenses the conversation into observations, per thread (the default; "
                        "in the background) or per user (resource: in the turn)")
    g.add_argument("--om-message-tokens", type=int, metavar="N",
                   help="with --observational-memory: unobserved message tokens that make the observer run "
                        "(message_tokens; default 30000; keep it well under the model's context)")
    g.add_argument("--om-observation-tokens", type=int, metavar="N",
                   help="with --observational-memory: observation tokens that make the reflector condense them "
                        "(observation_tokens; default 40000)")
    g.add_argument("--om-max-output-tokens", type=int, metavar="N",
                   help="with --observational-memory: cap each observer and reflector reply at N tokens "
                        "(max_output_tokens; default: none, the server's own limit; --max-tokens does not reach "
                        "them). A reply cut off at a limit is not used: the messages stay raw")
    g.add_argument("--om-model", metavar="PROVIDER/MODEL",
                   help="with --observational-memory: the observer's and reflector's model (observer_model and "
                        "reflector_model; default: the agent's --model)")


def memory_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The memory flags as ``MemoryOptions`` keywords, checked and their files read (``ValueError`` naming the flag
    and what to do), before anything opens. ``--om-model`` stays a name: ``model_agent`` resolves it."""
    from core.options import MemoryOptions, OptionsError, WorkingMemoryOptions

    def needs(owner: str, value: str | None, *flags: str) -> None:
        given = [flag for flag in flags if getattr(args, flag.removeprefix("--").replace("-", "_")) is not None]
        if given and value is None:
            raise ValueError(f"{' and '.join(given)} go{'es' if len(given) == 1 else ''} with {owner}: add {owner} "
                             f"(or drop {' and '.join(given)}).")

    def positive(flag: str, value: int | None, what: str, *, zero: str | None = None) -> None:
        if value is not None and (value < 0 or (value == 0 and zero is None)):
            allowed = f"0 ({zero}) or a positive number" if zero else "a positive number"
            raise ValueError(f"{flag} must be {allowed} of {what}, got {value}.")

    needs("--working-memory", args.working_memory, "--working-memory-template", "--working-memory-schema")
    needs("--semantic-recall", args.semantic_recall, "--semantic-recall-top-k", "--semantic-recall-range")
    needs("--observational-memory", args.observational_memory, "--om-message-tokens", "--om-observation-tokens",
          "--om-max-output-tokens", "--om-model")
    positive("--last-messages", args.last_messages, "messages", zero="no history")
    positive("--semantic-recall-top-k", args.semantic_recall_top_k, "messages")
    positive("--semantic-recall-range", args.semantic_recall_range, "messages", zero="the messages found alone")
    positive("--om-message-tokens", args.om_message_tokens, "tokens")
    positive("--om-observation-tokens", args.om_observation_tokens, "tokens")
    positive("--om-max-output-tokens", args.om_max_output_tokens, "tokens")
    if args.om_model is not None:
        from core.errors import ConfigurationError
        from core.llm.providers import parse_model_name

        try:
            parse_model_name(args.om_model)
        except ConfigurationError as exc:
            raise ValueError(f"--om-model {args.om_model}: {exc}") from None
    if args.last_messages is not None and args.observational_memory is not None:
        raise ValueError("--last-messages does nothing with --observational-memory, which replaces the message "
                         "history (its observations and the messages not observed yet stand in for it). Drop one "
                         "of them; --om-message-tokens says how much unobserved conversation is kept.")
    options: dict[str, Any] = {}
    if args.last_messages is not None:
        options["last_messages"] = args.last_messages
    if args.working_memory is not None:
        working: dict[str, Any] = {"enabled": True, "scope": args.working_memory}
        if args.working_memory_template is not None and args.working_memory_schema is not None:
            raise ValueError("--working-memory-template and --working-memory-schema: a working memory has a "
                             "Markdown template or a JSON schema, not both. Drop one of them.")
        if args.working_memory_template is not None:
            template = _read_text("--working-memory-template", args.working_memory_template)
            if not template.strip():
                raise ValueError(f"--working-memory-template {args.working_memory_template}: the file is empty. "
                                 "Write the Markdown the model fills in (for example '# User\\n- Name:\\n').")
            working["template"] = template
        if args.working_memory_schema is not None:
            working["schema"] = _read_schema(args.working_memory_schema)
        try:
            WorkingMemoryOptions(**working)
        except ValueError as exc:  # OptionsError, WorkingMemoryError: the schema file's content
            raise ValueError(f"--working-memory-schema {args.working_memory_schema}: {exc}") from None
        options["working_memory"] = working
    if args.semantic_recall is not None:
        recall: dict[str, Any] = {"enabled": True, "scope": args.semantic_recall}
        if args.semantic_recall_top_k is not None:
            recall["top_k"] = args.semantic_recall_top_k
        if args.semantic_recall_range is not None:
            recall["message_range"] = {"before": args.semantic_recall_range, "after": args.semantic_recall_range}
        options["semantic_recall"] = recall
    if args.observational_memory is not None:
        observational: dict[str, Any] = {"enabled": True, "scope": args.observational_memory}
        for key, value in (("message_tokens", args.om_message_tokens),
                           ("observation_tokens", args.om_observation_tokens),
                           ("max_output_tokens", args.om_max_output_tokens)):
            if value is not None:
                observational[key] = value
        options["observational_memory"] = observational
    try:
        MemoryOptions(**options)
    except OptionsError as exc:  # (what the checks above do not catch: said with the option's name)
        raise ValueError(f"The memory flags make options that cannot work: {exc}") from None
    return options


def _read_text(flag: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise ValueError(f"{flag} {path}: the file is not UTF-8 text. Save it as UTF-8.") from None
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot be read ({exc.strerror or exc}). Give the path of a file "
                         "that exists.") from None


def _read_schema(path: str) -> dict[str, Any]:
    import json

    text = _read_text("--working-memory-schema", path)
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--working-memory-schema {path}: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno}).") from None
    if not isinstance(schema, dict):
        raise ValueError(f"--working-memory-schema {path}: a JSON Schema is an object (for example "
                         '{"type": "object", "properties": {"name": {"type": "string"}}}), got '
                         f"{type(schema).__name__}.")
    return schema


def describe_memory(options: Any) -> str:
    """What the ``--model`` agent's memory keeps, in a line (``serve`` says it when it starts)."""
    parts: list[str] = []
    om = options.observational_memory
    if om.enabled:
        observer = f"model {om.observer_model}" if om.observer_model else "the agent's model"
        cap = f", replies up to {om.max_output_tokens:,} tokens" if om.max_output_tokens is not None else ""
        parts.append(f"observational memory ({om.scope}; observes at {om.message_tokens:,} tokens, reflects at "
                     f"{om.observation_tokens:,}; {observer}{cap})")
    elif options.history_enabled:
        parts.append(f"the last {options.message_history.limit} messages")
    else:
        parts.append("no history")
    wm = options.working_memory
    if wm.enabled:
        shape = "a schema" if wm.schema is not None else "a template" if wm.template is not None else \
            "the built-in template"
        parts.append(f"working memory ({wm.scope}, {shape})")
    recall = options.semantic_recall
    if recall.enabled:
        parts.append(f"semantic recall ({recall.scope}, top {recall.top_k}, {recall.message_range.before} before and "
                     f"{recall.message_range.after} after each)")
    return ", ".join(parts)


def shared_default_resource(options: Any, default_resource: str) -> str | None:
    """What a request naming no user shares, when the ``--model`` agent keeps memory per user (working memory,
    semantic recall or observational memory with scope resource), in a line ``serve`` says when it starts; None
    when nothing is kept per user (a request naming no thread begins a thread of its own). Every such request is
    stored under ``--default-resource``: a chat front end that sends no user id gives all its users one memory."""
    parts = [name for name, part in (("working memory", options.working_memory),
                                      ("semantic recall", options.semantic_recall),
                                      ("observational memory", options.observational_memory))
             if part.enabled and part.scope == "resource"]
    if not parts:
        return None
    kept = " and ".join(parts)
    return (f"{kept} {'is' if len(parts) == 1 else 'are'} per user (resource): a request names its user by "
            f"metadata.resource_id, x-resource-id, user or a token of one resource; requests naming none all share "
            f"resource {default_resource!r} (--default-resource), whoever sends them")


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
        given = [flag for flag, dest in MODEL_ONLY_FLAGS if getattr(args, dest) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --model only: with "
                             "--agents, each agent runs with the memory, name, instructions and model settings its "
                             f"module gives it. Drop {' and '.join(given)}, or set them in {args.agents.split(':')[0]}.")
    memory = memory_options_from_args(args) if not args.agents else None
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
                timeout=args.model_timeout, self_hosted=self_hosted, memory=memory, om_model=args.om_model)
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
        if not token:
            auth = "no token: any client may use any resource's memory"
        elif policy.tokens is None:
            auth = "token required"
        else:
            auth = f"token required, {len(policy.tokens.entries)} token(s) from {policy.tokens.path}"
        out.write(f"memory-studio gateway: {len(agents)} agent(s) ({', '.join(agents)}) on {url} ({auth})\n")
        if args.model:
            from core.memory import Memory

            (agent,) = agents.values()
            assert isinstance(agent.memory, Memory)  # (model_agent gives it one)
            out.write(f"memory of {agent.name!r}: {describe_memory(agent.memory.options)}\n")
            shared = shared_default_resource(agent.memory.options, args.default_resource)
            if shared is not None:
                out.write(f"{shared}\n")
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
                timeout: float | None = None, self_hosted: bool | None = None,
                memory: Mapping[str, Any] | None = None, om_model: str | None = None) -> dict[str, Any]:
    """``--model``: one agent on the named model (an unknown provider or a missing key is a
    ``ConfigurationError`` now, before the server starts); ``max_tokens`` caps its replies (``--max-tokens``),
    ``context_window`` is the server's context size, which the agent fits each prompt into (``--context-window``),
    ``timeout`` how long a model call may take (``--model-timeout``), ``self_hosted`` whether its server is
    self-hosted (``--self-hosted``; None: from the base URL). ``memory``: its ``MemoryOptions`` keywords (the memory
    flags, ``memory_options_from_args``; None: the default memory, the last 10 messages); ``om_model`` the observer's
    and reflector's model name (``--om-model``; None: the agent's model), resolved with the agent's model, before
    the database opens."""
    from core.agent import Agent
    from core.cli_store import open_cli_store
    from core.memory import Memory
    from core.options import MemoryOptions

    from core.llm.providers import resolve_model

    # An unknown provider or a missing key is refused before the database is opened: a misspelt name
    # left a new, empty database file behind.
    settings: dict[str, Any] = {key: value for key, value in (("context_window", context_window),
                                                               ("timeout", timeout),
                                                               ("self_hosted", self_hosted)) if value is not None}
    chat_model = resolve_model(model, what=f"model of agent {name!r}", **settings)
    models = [chat_model]
    try:
        options = dict(memory or {})
        if om_model is not None:
            observer = resolve_model(om_model, what=f"observational memory model of agent {name!r} (--om-model)")
            models.append(observer)
            options["observational_memory"] = {**options.get("observational_memory", {"enabled": True}),
                                               "observer_model": observer, "reflector_model": observer}
        memory_options = MemoryOptions(**options)
        # As every command opens it: another program's database is refused before the server starts (each
        # request failed with 500 on its first read of a table it does not have).
        store = open_cli_store(db, create=True)
    except BaseException:
        for each in models:
            each.close()
        raise
    try:
        # With semantic recall on, the local embedding model loads here: not installed, it says how to install it.
        agent_memory = Memory(store, memory_options)
    except BaseException:
        store.close()
        for each in models:
            each.close()
        raise
    agent = Agent(name, instructions=instructions, model=chat_model, memory=agent_memory,
                  model_settings={"max_tokens": max_tokens} if max_tokens is not None else None)
    return {name: agent}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
