"""The request guard: what an HTTP request must be before any ASGI app sees it.

A gateway on 127.0.0.1 without a token is still reachable from every web page the user opens: a
cross-site ``text/plain`` POST needs no CORS preflight, and a DNS-rebinding page (``evil.example``
resolving to 127.0.0.1) sends ``Host: evil.example`` and reads the replies. ``RequestGuard`` wraps any
ASGI app (the chat gateway, the MCP server's HTTP transport) and refuses, before the app runs:

- a request target (path and query) over ``MAX_TARGET_BYTES`` (414) or header lines over ``MAX_HEADER_BYTES``
  (431), whatever else the request is (``head_refusal``);
- a ``Host`` that is not one this server is served as: the bound address, ``localhost`` or an
  ``--allowed-host`` (421; behind a wildcard bind such as 0.0.0.0 any IP literal is accepted too, as
  an IP cannot be rebound);
- an ``Origin`` not listed with ``--allow-origin`` (403). Listed origins get CORS answers
  (preflights, ``Access-Control-Allow-Origin``), so a browser app can call the server;
- a missing or wrong bearer token, when one is set (401; the scheme is case-insensitive, RFC 7235):
  the shared ``token``, or one of a tokens file's (``tokens``, ``core.gateway.tokens``), whose entry's
  resources the request may then use. The caller (``core.gateway.access.Caller``) goes into the ASGI
  scope for the routes to ask;
- a body that is not ``application/json`` (415);
- a body over ``max_body_bytes`` (413): at once when ``Content-Length`` says so, otherwise as soon as
  the bytes read pass the limit, without reading the rest;
- JSON nested deeper than ``max_json_depth`` (400), found while the body streams in, before the app
  has the last byte, and a JSON body holding a NUL byte (400): UTF-16 or UTF-32 text, which the count
  (made on the bytes as UTF-8) would misread and ``json.loads`` would read.

    policy = GuardPolicy(host="127.0.0.1", port=8787, token="s3cret")
    app = RequestGuard(app, policy)

or from the command line flags: ``add_guard_arguments(parser, token_env=...)`` then
``policy_from_args(args, token_env=...)``.
Every refusal is OpenAI-style JSON (``{"error": {"message", "type", "code", "param"}}``) whose
message says what to change, and nothing of a refused request reaches the app.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from core.gateway.access import ANYONE, CALLER_KEY, Caller
from core.gateway.errors import GatewayError
from core.gateway.tokens import TokensFile, load_tokens_file
from core.ids import SHOWN_CHARS, shown

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

MB = 1024 * 1024
DEFAULT_MAX_BODY_MB = 16
#: The longest request target (path and query, as sent) and header lines (names, values and their ``: `` and line
#: ends, together) a request may have: nginx's limits for both (414 and 431 past them). A head larger than
#: ``MAX_HEAD_BYTES`` never reaches the guard: the server's protocol answers it (``server.HeadLimitedH11``).
MAX_TARGET_BYTES = 8 * 1024
MAX_HEADER_BYTES = 32 * 1024
MAX_HEAD_BYTES = 64 * 1024
DEFAULT_MAX_JSON_DEPTH = 64
#: Paths a load balancer may probe without the token (Host and Origin are still checked).
DEFAULT_OPEN_PATHS = frozenset({"/health"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Response headers a browser lets scripts read without being told (the CORS-safelisted ones).
_SAFELISTED = frozenset({"cache-control", "content-language", "content-length", "content-type", "expires",
                         "last-modified", "pragma"})


class RequestRefused(GatewayError):
    """The guard refused a request; raised out of ``receive`` to stop an app mid-read."""


@dataclass(frozen=True)
class GuardPolicy:
    """What requests a server accepts. Frozen: build a new one with ``dataclasses.replace``.

    ``host``/``port``: where the server is bound (the bound address is an accepted ``Host``).
    ``allowed_hosts``: more ``Host`` names (``--allowed-host``): ``name`` for any port, ``name:port``
    for that port only. ``allowed_origins``: web origins (``scheme://host[:port]``) whose pages may
    call the server (``--allow-origin``). ``token``: the shared bearer token, for every resource (None
    or "" and no ``tokens``: no check). ``tokens``: a tokens file's entries (``--tokens-file``), each
    token for the resources its entry lists. ``max_body_bytes``: the largest request body (``--max-body-mb``, 16 MB).
    ``max_json_depth``: the deepest nesting of arrays and objects in a JSON body. ``open_paths``:
    paths answered without the token (load-balancer probes).
    """

    host: str = "127.0.0.1"
    port: int = 0
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    token: str | None = None
    tokens: TokensFile | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_MB * MB
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    open_paths: frozenset[str] = field(default=DEFAULT_OPEN_PATHS)

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError(f"The body limit must be positive, got {self.max_body_bytes} bytes.")
        if self.max_json_depth < 1:
            raise ValueError(f"The JSON nesting limit must be at least 1, got {self.max_json_depth}.")
        if self.token:
            check_token(self.token, "The API token", "the token")
            # The shared token is compared first: an entry holding it (an existing secret hashed into the file while
            # the shared token's variable still holds it) would reach every resource, and no trace would name it.
            entry = self.tokens.match(self.token) if self.tokens is not None else None
            if entry is not None:
                where = f" {self.tokens.path}" if self.tokens is not None and self.tokens.path is not None else ""
                raise ValueError(
                    f"The shared API token (--token, or its environment variable) is also the token of entry "
                    f"{entry.name!r} of the tokens file{where}: sent by that entry's user it would reach every "
                    "resource, not only the entry's. Give the entry a new token (`memory-studio tokens new`), or "
                    "unset the shared token.")
        object.__setattr__(self, "allowed_hosts", frozenset(_host_entry(h) for h in self.allowed_hosts))
        object.__setattr__(self, "allowed_origins", frozenset(normalize_origin(o) for o in self.allowed_origins))
        object.__setattr__(self, "open_paths", frozenset(self.open_paths))

    def bound(self, host: str, port: int) -> GuardPolicy:
        """The same policy for a server bound to ``host:port`` (``--port 0`` learns its port late)."""
        return replace(self, host=host, port=port)

    def accepts_host(self, header: str | None, local_address: str | None = None) -> bool:
        """Whether a ``Host`` header names this server.

        ``local_address``: the IP the connection arrived on (ASGI ``scope["server"]``), which is
        always an address this server is served as.
        """
        if not header:
            return False
        parsed = _split_host(header)
        if parsed is None:
            return False
        name, port = parsed
        bound = _bare(self.host.lower())
        if name == "localhost" or (name == bound and bound not in _WILDCARD_HOSTS):
            return True
        if local_address and name == _bare(local_address.lower()):
            return True
        if self.host.lower() in _WILDCARD_HOSTS and _is_ip(name):
            return True
        return name in self.allowed_hosts or (port is not None and f"{name}:{port}" in self.allowed_hosts)

    def accepts_origin(self, origin: str) -> bool:
        try:
            return normalize_origin(origin) in self.allowed_origins
        except ValueError:
            return False

    @property
    def needs_token(self) -> bool:
        """Whether requests must carry a token (a shared one, or a tokens file's)."""
        return bool(self.token) or self.tokens is not None

    def accepts_token(self, authorization: str | None) -> bool:
        """``Authorization: Bearer <token>``, the scheme in any case, the token compared in constant time."""
        return self.caller(authorization) is not None

    def caller(self, authorization: str | None) -> Caller | None:
        """Who sent ``authorization``: every resource for the shared token (or when no token is set), a
        tokens file entry's resources for its token; None when the token is missing or wrong."""
        if not self.needs_token:
            return ANYONE
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        given = given.strip()
        if self.token and hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                                              self.token.encode("utf-8", "surrogateescape")):
            return ANYONE
        entry = self.tokens.match(given) if self.tokens is not None and given else None
        return Caller(entry.name, entry.resources) if entry is not None else None


# -- the middleware ---------------------------------------------------------------------------------


class RequestGuard:
    """ASGI middleware enforcing a ``GuardPolicy`` in front of ``app`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        origin = headers.get("origin")
        caller = self.policy.caller(headers.get("authorization"))
        refusal = self._refusal(scope, headers, origin, caller)
        if refusal is None:
            # (None passes only on an open path or as a preflight, which name no resource.)
            scope[CALLER_KEY] = caller or ANYONE
        if refusal is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": refusal.message[:120]})
                return
            # A listed origin's page may read why it was refused (a wrong token, say): without CORS headers
            # the browser would hide the answer behind a bare network error.
            listed = origin if origin is not None and self.policy.accepts_origin(origin) else None
            await _send_error(send, refusal, origin=listed)
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        if _is_preflight(scope, headers, origin):
            assert origin is not None
            await _send_preflight(send, origin, headers)
            return
        await _Exchange(self.app, self.policy, scope, receive, send, headers, origin).run()

    def _refusal(self, scope: MutableMapping[str, Any], headers: dict[str, str], origin: str | None,
                 caller: Caller | None) -> RequestRefused | None:
        policy = self.policy
        too_large = head_refusal(scope)
        if too_large is not None:
            return too_large
        host = headers.get("host")
        server = scope.get("server")
        if not policy.accepts_host(host, str(server[0]) if server else None):
            return RequestRefused(
                421, f"This server is not served as {shown(host)}. Use the address it listens on or localhost; to "
                "serve it under another name, start it with --allowed-host NAME.",
                type="invalid_request_error", code="host_not_allowed")
        if origin is not None and not policy.accepts_origin(origin):
            return RequestRefused(
                403, f"Requests from web pages are refused unless their origin is listed; this one came from "
                f"{shown(origin)}. To serve a browser app, start the server with --allow-origin "
                f"{origin if len(origin) <= SHOWN_CHARS else 'ORIGIN'}.",
                type="permission_error", code="origin_not_allowed")
        # A CORS preflight carries no token, so it is answered here and never reaches the app; browsers
        # always send Origin with one, so an OPTIONS without it is an ordinary request (token needed).
        preflight = _is_preflight(scope, headers, origin)
        if not preflight and scope["path"] not in policy.open_paths and caller is None:
            given = headers.get("authorization")
            message = ("This server needs an API token: send 'Authorization: Bearer <token>' (with the openai "
                       "client, api_key=<token>)." if not given else "The API token is not valid for this server.")
            return RequestRefused(401, message, type="authentication_error", code="invalid_api_key")
        if scope["type"] != "http":
            return None
        has_body = scope["method"] in _BODY_METHODS or "transfer-encoding" in headers or \
            headers.get("content-length", "0") not in ("", "0")
        if has_body and not _is_json(headers.get("content-type")):
            got = headers.get("content-type") or "no Content-Type"
            return RequestRefused(
                415, f"Send the request body as JSON with 'Content-Type: application/json' (got {shown(got)}).",
                code="unsupported_media_type")
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > policy.max_body_bytes:
            return _too_large(policy, int(declared))
        return None


def head_refusal(scope: MutableMapping[str, Any]) -> RequestRefused | None:
    """The 414 of a request target over ``MAX_TARGET_BYTES``, the 431 of header lines over ``MAX_HEADER_BYTES``."""
    query = scope.get("query_string") or b""
    target = len(scope.get("raw_path") or scope["path"].encode()) + (len(query) + 1 if query else 0)  # ("?" too)
    if target > MAX_TARGET_BYTES:
        return target_too_long(f"{target:,} bytes")
    header_bytes = sum(len(name) + len(value) + 4 for name, value in scope.get("headers") or ())
    if header_bytes > MAX_HEADER_BYTES:
        return headers_too_large(f"{header_bytes:,} bytes")
    return None


def target_too_long(size: str) -> RequestRefused:
    return RequestRefused(
        414, f"The request's path and query are {size}, over this server's limit of {MAX_TARGET_BYTES:,} bytes. "
        "Nothing was run. Ids and names of that size are refused anyway (at most 256 characters); send large "
        "values in a JSON body.", code="uri_too_long")


def headers_too_large(size: str) -> RequestRefused:
    return RequestRefused(
        431, f"The request's header lines are {size}, over this server's limit of {MAX_HEADER_BYTES:,} bytes. "
        "Nothing was run. Send fewer or shorter headers (large values go in a JSON body).",
        code="headers_too_large")


class _Exchange:
    """One HTTP request through the guard: a capped, depth-checked body and CORS headers on the reply."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy, scope: MutableMapping[str, Any], receive: Receive,
                 send: Send, headers: dict[str, str], origin: str | None) -> None:
        self.app, self.policy, self.scope = app, policy, scope
        self._receive, self._send = receive, send
        self.origin = origin
        self.read = 0
        self.depth = JsonDepth(policy.max_json_depth) if _is_json(headers.get("content-type")) else None
        self.started = False
        self.refused = False

    async def run(self) -> None:
        try:
            await self.app(self.scope, self.receive, self.send)
        except RequestRefused:
            if not self.refused:
                raise
        except Exception:
            if not self.refused:
                raise
            # The app failed because its body was cut off; the client already has the guard's answer.
            log.debug("the app stopped after the guard refused its request body", exc_info=True)

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] != "http.request" or self.refused:
            return message
        chunk = message.get("body", b"")
        self.read += len(chunk)
        refusal: RequestRefused | None = None
        if self.read > self.policy.max_body_bytes:
            refusal = _too_large(self.policy, None)
        elif self.depth is not None and b"\x00" in chunk:
            # JSON text never holds a NUL byte (a string writes it \u0000), UTF-16 and UTF-32 text always does: such
            # a body, which a parser guessing its encoding would read, hides its brackets from the nesting count.
            refusal = RequestRefused(
                400, "The JSON body holds NUL bytes, as UTF-16 or UTF-32 text does; send it encoded as UTF-8.",
                code="json_not_utf8")
        elif self.depth is not None and not self.depth.feed(chunk):
            refusal = RequestRefused(
                400, f"The JSON body is nested more than {self.policy.max_json_depth} levels deep; "
                "send a flatter document.", code="json_too_deep")
        if refusal is None:
            return message
        self.refused = True
        if not self.started:
            await _send_error(self._send, refusal, origin=self.origin, close=True)
        raise refusal

    async def send(self, message: Message) -> None:
        if self.refused:
            return  # the guard answered already; whatever the interrupted app says is dropped
        if message["type"] == "http.response.start":
            self.started = True
            if self.origin is not None:
                message = {**message, "headers": [*message.get("headers", []),
                                                  *_cors_headers(self.origin, message.get("headers", []))]}
        await self._send(message)


# -- JSON nesting -----------------------------------------------------------------------------------


_SLICE = 1 << 20


class JsonDepth:
    """Tracks how deep a JSON document nests while its bytes arrive, chunk by chunk.

    It does not validate JSON (the app's parser does); it only counts brackets outside strings
    (string contents and their escapes are skipped), so a depth bomb is refused after its first
    few hundred bytes. The work is done by bytes methods and numpy, not a Python loop per byte.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.depth = 0
        self.in_string = False
        self._held = b""  # trailing backslashes of the previous chunk: their escape may span chunks

    def feed(self, chunk: bytes) -> bool:
        """False once the document is nested deeper than the limit."""
        for start in range(0, len(chunk), _SLICE):
            if not self._feed(chunk[start:start + _SLICE]):
                return False
        return True

    def _feed(self, chunk: bytes) -> bool:
        data = self._held + chunk
        kept = data.rstrip(b"\\")
        # A run of backslashes pairs up from its start: an odd run at the end escapes the next
        # chunk's first byte, so one backslash waits for it.
        self._held = b"\\" if (len(data) - len(kept)) % 2 else b""
        data = data[:len(data) - len(self._held)]
        # Pairs of backslashes first, then what a lone one escapes: every quote left delimits a string.
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
        if not data:
            return True
        codes = np.frombuffer(data, dtype=np.uint8)
        quotes = codes == 0x22
        outside = (np.cumsum(quotes, dtype=np.int64) + self.in_string) % 2 == 0
        steps = np.zeros(len(codes), dtype=np.int8)
        steps[((codes == 0x5B) | (codes == 0x7B)) & outside] = 1
        steps[((codes == 0x5D) | (codes == 0x7D)) & outside] = -1
        if int(quotes.sum()) % 2:
            self.in_string = not self.in_string
        levels = np.cumsum(steps, dtype=np.int64) + self.depth
        self.depth = int(levels[-1])
        return int(levels.max()) <= self.limit


def json_depth_exceeds(data: bytes | str, limit: int) -> bool:
    """Whether a whole JSON document nests deeper than ``limit`` (for bodies read another way)."""
    checker = JsonDepth(limit)
    return not checker.feed(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)


# -- command-line flags ------------------------------------------------------------------------------


def add_guard_arguments(parser: argparse.ArgumentParser, *, token_env: str, tokens_file_env: str) -> None:
    """``--allowed-host``, ``--allow-origin``, ``--token``, ``--tokens-file`` and ``--max-body-mb`` (read by
    ``policy_from_args``)."""
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME[:PORT]",
                        help="another Host name this server answers to (repeatable), for example the name a "
                             "reverse proxy or LAN clients use; the bound address and localhost always work")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="SCHEME://HOST[:PORT]",
                        help="a web origin whose pages may call this server (repeatable), for a browser app; "
                             "requests from any other origin are refused")
    parser.add_argument("--token", default=None,
                        help="API token clients must send as 'Authorization: Bearer <token>' "
                             f"(default: ${token_env}; prefer the variable, a flag shows in ps); it may use "
                             "every resource")
    parser.add_argument("--tokens-file", default=None, metavar="PATH",
                        help="a JSON file of tokens, each reaching only the resources listed for it (default: "
                             f"${tokens_file_env}); `memory-studio tokens new` makes one. Works beside --token")
    parser.add_argument("--max-body-mb", type=float, default=float(DEFAULT_MAX_BODY_MB), metavar="MB",
                        help=f"largest request body accepted, in MB (default {DEFAULT_MAX_BODY_MB}); larger ones get 413")


def token_problem(token: str) -> str | None:
    """Why ``token`` could never match a request's ``Authorization`` header, or None.

    HTTP strips blanks around a header value and carries ASCII (clients refuse control characters and
    most refuse other text), so a token with a trailing newline or carriage return (a ``.env`` file
    written on Windows, ``echo`` into a secret), blanks at either end, or characters outside printable
    ASCII would make the server refuse every request.
    """
    if token != token.strip():
        return "starts or ends with whitespace (a space, tab, newline or carriage return)"
    at = next((i for i, c in enumerate(token) if not (c.isascii() and c.isprintable())), None)
    if at is not None:  # where, not which: the message may be logged, and the token is a secret
        bad = token[at]
        kind = "a control character" if bad.isascii() or not bad.isprintable() else "a character outside ASCII"
        return f"contains {kind} (character {at + 1})"
    return None


def check_token(token: str, named: str, fix: str) -> None:
    """Refuse a token no client can send (``token_problem``): ``named`` says where it came from, ``fix`` what
    to set without the character."""
    problem = token_problem(token)
    if problem is not None:
        raise ValueError(f"{named} {problem}: no HTTP client can send that in its Authorization header, so every "
                         f"request would be refused with 401. Set {fix} without it.")


def token_from_args(args: argparse.Namespace, token_env: str) -> tuple[str | None, str]:
    """The token of ``add_guard_arguments``'s flags (``--token``, else ``$token_env``; None: none) and where it
    came from, as a message names it."""
    if args.token is not None:
        return args.token or None, "--token"
    return os.environ.get(token_env, "") or None, f"${token_env}"


def tokens_file_from_args(args: argparse.Namespace, tokens_file_env: str) -> TokensFile | None:
    """The tokens file of ``--tokens-file`` (else ``$tokens_file_env``), read and checked, or None."""
    path = args.tokens_file if args.tokens_file is not None else os.environ.get(tokens_file_env, "")
    return load_tokens_file(path) if path else None


def policy_from_args(args: argparse.Namespace, *, token_env: str, tokens_file_env: str, host: str | None = None,
                     port: int | None = None) -> GuardPolicy:
    """The policy the flags of ``add_guard_arguments`` (and ``--host``/``--port``) describe.

    Raises ``ValueError`` with a message naming the flag when a value is unusable.
    """
    if not args.max_body_mb > 0:
        raise ValueError(f"--max-body-mb must be a positive number of megabytes, got {args.max_body_mb}.")
    token, where = token_from_args(args, token_env)
    if token:
        check_token(token, f"The token in {where}", where)
    return GuardPolicy(host=host if host is not None else args.host, port=port if port is not None else args.port,
                       allowed_hosts=frozenset(args.allowed_host), allowed_origins=frozenset(args.allow_origin),
                       token=token, tokens=tokens_file_from_args(args, tokens_file_env),
                       max_body_bytes=int(args.max_body_mb * MB))


# -- helpers ----------------------------------------------------------------------------------------


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, without a default port; ValueError if it is not one."""
    match = re.fullmatch(r"(https?)://(\[[0-9a-fA-F:.]+\]|[^/:\s\[\]]+)(?::(\d{1,5}))?/?", origin.strip(),
                         re.IGNORECASE)
    if match is None:
        if origin.strip() == "*":
            raise ValueError("--allow-origin takes each origin to allow (scheme://host[:port]); '*' would let "
                             "every web page use this server.")
        raise ValueError(f"--allow-origin takes an origin like https://app.example.com or http://localhost:5173, "
                         f"got {origin!r}.")
    scheme, host, port = match.group(1).lower(), match.group(2).lower(), match.group(3)
    if port is not None and int(port) == _DEFAULT_PORTS[scheme]:
        port = None
    return f"{scheme}://{host}" + (f":{int(port)}" if port is not None else "")


def _host_entry(entry: str) -> str:
    parsed = _split_host(entry.strip())
    if parsed is None or not parsed[0] or "/" in entry:
        raise ValueError(f"--allowed-host takes a host name, optionally with :port (for example "
                         f"studio.lan or studio.lan:8787), got {entry!r}.")
    name, port = parsed
    return name if port is None else f"{name}:{port}"


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``Host`` header → (lower-case name without brackets or trailing dot, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_or_empty = value.partition(":")
        if ":" in port_text_or_empty:
            return None
        port_text = port_text_or_empty if sep else None
    if port_text is not None and not (port_text.isdigit() and int(port_text) <= 65535):
        return None
    if not name or any(c in name for c in " /\\@?#"):
        return None
    return name.rstrip("."), int(port_text) if port_text is not None else None


def _bare(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _headers(scope: MutableMapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        name = key.decode("latin-1").lower()
        if name not in out:  # the first of a repeated header, as Starlette reads it
            out[name] = value.decode("latin-1")
    return out


def _is_preflight(scope: MutableMapping[str, Any], headers: dict[str, str], origin: str | None) -> bool:
    """A CORS preflight: ``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``."""
    return scope["type"] == "http" and scope["method"] == "OPTIONS" and origin is not None and \
        "access-control-request-method" in headers


def _is_json(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


def _too_large(policy: GuardPolicy, declared: int | None) -> RequestRefused:
    size = f" ({declared:,} bytes)" if declared is not None else ""
    limit = policy.max_body_bytes
    shown = f"{limit / MB:g} MB ({limit:,} bytes)" if limit >= MB else f"{limit:,} bytes"
    return RequestRefused(413, f"The request body{size} is over this server's limit of {shown}. Send less, or "
                          "start the server with a larger --max-body-mb.", code="body_too_large")


def error_body(refusal: RequestRefused) -> bytes:
    return json.dumps({"error": {"message": refusal.message, "type": refusal.type, "code": refusal.code,
                                 "param": refusal.param}}).encode("utf-8")


async def _send_error(send: Send, refusal: RequestRefused, *, origin: str | None, close: bool = False) -> None:
    body = error_body(refusal)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if refusal.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if close:  # the rest of the body is never read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    if origin is not None:
        headers.extend(_cors_headers(origin, headers))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send_preflight(send: Send, origin: str, headers: dict[str, str]) -> None:
    """A CORS preflight from a listed origin: allow the method and headers it asks for."""
    method = headers.get("access-control-request-method", "").strip()
    asked = headers.get("access-control-request-headers", "").strip()
    reply = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
             (b"access-control-allow-methods", (method or "GET").encode("latin-1")),
             (b"access-control-max-age", b"600"), (b"content-length", b"0")]
    if asked:
        reply.append((b"access-control-allow-headers", asked.encode("latin-1")))
    await send({"type": "http.response.start", "status": 204, "headers": reply})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _cors_headers(origin: str, response_headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    names = sorted({k.decode("latin-1").lower() for k, _ in response_headers} - _SAFELISTED)
    out = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
    if names:
        out.append((b"access-control-expose-headers", ", ".join(names).encode("latin-1")))
    return out


__all__ = ["DEFAULT_MAX_BODY_MB", "DEFAULT_MAX_JSON_DEPTH", "GuardPolicy", "JsonDepth", "RequestGuard",
           "MAX_HEADER_BYTES", "MAX_HEAD_BYTES", "MAX_TARGET_BYTES", "error_body", "head_refusal",
           "RequestRefused", "add_guard_arguments", "check_token", "json_depth_exceeds", "normalize_origin",
           "policy_from_args", "token_from_args", "token_problem", "tokens_file_from_args"]
