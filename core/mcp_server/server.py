"""The MCP server: ``MemoryTools`` behind the official MCP Python SDK (``mcp.server.mcpserver.MCPServer``).

Tools: ``search_memory``, ``list_threads``, ``read_thread``, ``get_working_memory``,
``update_working_memory``, ``remember``. Resources: each thread's transcript
(``memory://threads/<id>``, Markdown), listed per call (threads come and go), 500 a page with the
spec's cursor (``nextCursor``), and read through a template (the newest ``TRANSCRIPT_MESSAGES``
messages). ``list_threads`` pages too (``THREADS_PAGE`` threads, its ``cursor`` argument taking back an answer's
``nextCursor``), and ``read_thread`` reads older messages by ``page``. Every call runs on a worker thread, so the
event loop (and the other client requests) never waits on the database or an embedding. Our errors reach
the client as tool errors whose message says what to do; anything else is logged here and reported as a
failure of the tool. A call whose arguments do not fit a tool's input schema (a number for a string, an array for
an object, a required one missing, an argument name the tool does not have) is answered in one place for every tool
(``MemoryMCPServer.call_tool``), in the words of ``core.mcp_server.arguments``, which also keeps each string argument
the text sent (``as_sent``); a ``tools/call`` whose arguments are not a JSON object is refused before the SDK's own
check (``MemoryMCPServer._arguments_an_object``).

Transports: ``run_stdio`` (what desktop assistants and IDEs launch), or ``http_app`` for streamable
HTTP, wrapped in the gateway's ``RequestGuard`` (the same Host, Origin, token and body rules as
``memory-studio serve``; the guard's body limit is the only one). Each HTTP call's caller (the guard's
verdict on its token, ``core.gateway.access``) is read from the HTTP request the SDK hands the tool
(``_caller``) and passed to ``MemoryTools``, which keeps a tokens file's token to its resources.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, BinaryIO, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types import Resource as MCPResource
from mcp_types import Tool as MCPTool
from pydantic import Field, ValidationError

from core.errors import MemoryStudioError
from core.gateway.access import ANYONE, Caller, caller_of
from core.gateway.errors import operators_storage_error, storage_message
from core.ids import lone_surrogate, shown
from core.json_kind import json_kind
from core.mcp_server.arguments import arguments_not_an_object, arguments_refused, arguments_unfit, as_sent, over_limit
from core.mcp_server.tools import (
    DEFAULT_READ,
    MAX_READ,
    THREADS_PAGE,
    URI_PREFIX,
    CursorError,
    MemoryTools,
    transcript_uri,
)
from core.message_size import MessageTooLargeError
from core.scopes import ThreadOwnershipError
from core.storage import StorageError
from core.version import __version__
from core.working_memory import WorkingMemoryTooLargeError

log = logging.getLogger(__name__)
T = TypeVar("T")

SERVER_NAME = "memory-studio"
#: Shown to the client (and its model) when it connects.
INSTRUCTIONS = (
    "Long-term memory of this user, kept by Memory Studio. Use search_memory to find what was said before "
    "(hybrid keyword + vector recall, with scores), list_threads and read_thread to read conversations, "
    "get_working_memory for the notes kept about the user and update_working_memory to change them (send "
    "the whole text; follow the template), and remember to store a message in a thread."
)
#: The optional ``resource`` argument every tool takes.
ResourceArg = Annotated[str | None, Field(
    description="Whose memory: only on a server started with --any-resource (a bound server refuses others), or a "
                "delegation of the resource (delegation:<resource>:<agent>, as a delegation's result names it).")]

#: ``remember``'s optional ``idempotency_key`` argument (MCP has no headers).
IdempotencyKeyArg = Annotated[str | None, Field(
    description="Optional. A random id of 1 to 255 visible ASCII characters (a UUID), new for each message and sent "
                "unchanged when this same call is retried: a repeat stores nothing and answers the first call's "
                "result with replayed: true. Kept 24 hours for your token, the resource and this tool; the same key "
                "with other arguments is refused, and a call that failed stored nothing, so its retry runs again.")]

#: ``list_threads``' optional ``cursor`` argument.
CursorArg = Annotated[str | None, Field(
    description="Leave out for the first page; for the next, the nextCursor of the previous list_threads answer.")]


async def _call(fn: Callable[[], T], failure: type[Exception]) -> T:
    """Run ``fn`` on a worker thread; our errors become the SDK's tool/resource errors (shown to the client)."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except ThreadOwnershipError as exc:  # (the owner not named: the client may be another user)
        raise failure(exc.without_owner()) from exc
    except (MessageTooLargeError, WorkingMemoryTooLargeError) as exc:
        raise failure(over_limit(exc)) from exc
    except StorageError as exc:
        # An operator's storage error names the server's database file or server: its text is for the log only,
        # logged here once (the place that answers).
        if not operators_storage_error(exc):
            raise failure(str(exc)) from exc
        log.warning("a tool call met a storage error: %s", exc)
        raise failure(storage_message(exc)) from exc
    except (MemoryStudioError, LookupError, PermissionError, ValueError) as exc:
        raise failure(str(exc)) from exc


class MemoryMCPServer(MCPServer):
    """An ``MCPServer`` whose resource list is read from the database on each request, whose tools take each
    argument as the client sent it (``arguments.as_sent``), and which says what to send when a call's arguments are
    not a JSON object (``_arguments_an_object``)."""

    def __init__(self, tools: MemoryTools, *, log_level: str = "WARNING") -> None:
        bound = tools.binding.resource
        super().__init__(SERVER_NAME, title="Memory Studio", version=__version__, log_level=log_level.upper(),  # type: ignore[arg-type]
                         instructions=INSTRUCTIONS + (f" Every call is about resource {bound!r}." if bound else
                                                      " Name the resource in every call."),
                         tools=_tools(self, tools),
                         middleware=[self._arguments_an_object])
        self.memory_tools = tools
        # Served over HTTP (``http_app``): every request then has its caller from the guard, and one without
        # (an SDK that stopped handing tools the HTTP request) is refused rather than trusted as stdio's.
        self.over_http = False
        _register_transcripts(self, tools)

    async def _arguments_an_object(self, ctx: Any, call_next: Any) -> Any:
        """The SDK's middleware seam (it runs before the SDK checks a request's parameters): a ``tools/call`` whose
        ``arguments`` is not a JSON object (an array, a string, a number) is refused with -32602 and
        ``arguments_not_an_object``'s words, where the SDK's check answered a bare "Invalid request parameters" that
        did not say what to send. Any other request goes on as sent."""
        params = ctx.params
        arguments = params.get("arguments") if ctx.method == "tools/call" and isinstance(params, Mapping) else None
        if arguments is None or isinstance(arguments, Mapping):
            return await call_next(ctx)
        schemas = {tool.name: tool.input_schema for tool in await self.list_tools()}
        message = arguments_not_an_object(params.get("name"), arguments, schemas)
        log.info("refused a tools/call whose arguments are not an object: %s", message)
        raise MCPError(code=INVALID_PARAMS, message=message)

    async def list_tools(self) -> list[MCPTool]:
        """The SDK's tools, each input schema saying what ``call_tool`` holds to: no argument beyond its own
        (``additionalProperties: false``)."""
        return [tool.model_copy(update={"input_schema": {**tool.input_schema, "additionalProperties": False}})
                for tool in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """The SDK's ``call_tool``, after ``arguments_unfit`` checked the arguments against the tool's input schema
        (an argument the tool does not have, true or false for a number, which the SDK would ignore or take as 1 or
        0); arguments refused by it or by the SDK's pydantic validation (before the tool runs) get
        ``arguments_refused``'s message instead of pydantic's report (which repeats the values)."""
        schema = next((tool.input_schema for tool in await self.list_tools() if tool.name == name), None)
        unfit = arguments_unfit(schema, arguments) if schema is not None else []
        if unfit:
            raise ToolError(f"Error executing tool {name}: {arguments_refused(name, schema or {}, arguments, unfit)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: "
                            f"{arguments_refused(name, schema or {}, arguments, cause.errors())}") from cause

    async def _handle_list_resources(self, ctx: Any, params: Any) -> Any:
        # The SDK's handler calls list_resources() without the request; a tokens file's caller lists only its own,
        # a page at a time (``MemoryTools.transcripts``), the next page named by the answer's ``nextCursor``.
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS, ListResourcesResult

        caller = _caller(self, ctx, ResourceError)
        cursor = getattr(params, "cursor", None)
        try:
            page = await _call(lambda: self.memory_tools.transcripts(caller, cursor), ResourceError)
        except ResourceError as exc:
            if isinstance(exc.__cause__, CursorError):  # the spec's answer to a cursor it cannot take
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
            raise
        return ListResourcesResult(resources=_resources(page.rows), next_cursor=page.next_cursor)

    async def list_resources(self, caller: Caller | None = None) -> list[MCPResource]:
        """The first page of the transcripts offered to ``caller`` (``resources/list`` answers the others)."""
        page = await _call(lambda: self.memory_tools.transcripts(caller or ANYONE), ResourceError)
        return _resources(page.rows)


def _resources(rows: list[dict[str, Any]]) -> list[MCPResource]:
    return [MCPResource(uri=transcript_uri(r["threadId"]), name=str(r["name"]), mime_type="text/markdown",
                        description=(f"Transcript of thread {r['threadId']}: "
                                     + (f"the {r['delegation']}, what the sub-agent keeps of that resource's turns "
                                        if r["delegation"] else "")
                                     + f"(resource {r['resource']}, {r['messageCount']} messages)"))
            for r in rows]


def _caller(server: Any, request_context: Any, failure: type[Exception] = ToolError) -> Caller:
    """The caller of an MCP request (a tool's ``ctx.request_context``, or the request context the resource
    list is handed): from the HTTP request the guard let in, or ``ANYONE`` over stdio. A server served over
    HTTP refuses a request that comes without its HTTP request (fails closed), as the SDK's ``failure`` (a
    tool's or a resource's error: shown whole)."""
    request = getattr(request_context, "request", None)
    if request is None and getattr(server, "over_http", False):
        raise failure("This MCP request reached the server without its HTTP request, so who sent it is "
                      "unknown; it is refused. (The installed MCP SDK may have changed how it hands "
                      "requests to tools: report it.)")
    return caller_of(getattr(request, "scope", None) if request is not None else None)




def _tools(server: MCPServer, tools: MemoryTools) -> list[Tool]:
    """The tools ``server`` serves over ``tools``: the SDK's, made from their signatures, each taking its arguments
    as sent (``arguments.as_sent``)."""
    from core.recall.text import MAX_QUERY_CHARS  # (not at import: core.recall brings the index with it)

    run = functools.partial(_call, failure=ToolError)
    made: list[Tool] = []

    def tool(description: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            made.append(as_sent(Tool.from_function(fn, description=description)))
            return fn
        return add

    @tool(description="Search this user's memory: hybrid recall (keyword + vector) over every stored "
                      "message, best first, with fused, vector and keyword scores. Optionally only one thread. "
                      f"The query: at most {MAX_QUERY_CHARS:,} characters.")
    async def search_memory(ctx: Context, query: str, top_k: int = 5, thread: str | None = None,
                            resource: ResourceArg = None) -> dict[str, Any]:
        caller = _caller(server, ctx.request_context)
        return await run(lambda: tools.search_memory(query, top_k, thread, resource, caller=caller))

    @tool(description="List this user's threads (conversations) and its delegations' threads, "
                      f"{THREADS_PAGE} a page, newest created first, with message counts and last activity. "
                      "When the answer's nextCursor is not null, more follow: call list_threads again with "
                      "cursor=<that nextCursor> for the next page.")
    async def list_threads(ctx: Context, cursor: CursorArg = None, resource: ResourceArg = None) -> dict[str, Any]:
        caller = _caller(server, ctx.request_context)
        return await run(lambda: tools.list_threads(resource, cursor, caller=caller))

    @tool(description=f"Read a thread: its newest messages ('last' of them, default {DEFAULT_READ}, at most "
                      f"{MAX_READ}), oldest first. page=1 reads the 'last' messages before those, page=2 the "
                      "ones before, and so on; hasMore says whether older messages remain.")
    async def read_thread(ctx: Context, thread: str, last: int = DEFAULT_READ,
                          resource: ResourceArg = None, page: int = 0) -> dict[str, Any]:
        caller = _caller(server, ctx.request_context)
        return await run(lambda: tools.read_thread(thread, last, resource, page, caller=caller))

    @tool(description="The working memory kept about this user (Markdown following a template, or JSON "
                      "following a schema), with the template or schema it follows.")
    async def get_working_memory(ctx: Context, thread: str | None = None,
                                 resource: ResourceArg = None) -> dict[str, Any]:
        caller = _caller(server, ctx.request_context)
        return await run(lambda: tools.get_working_memory(thread, resource, caller=caller))

    @tool(description="Change the working memory: Markdown memory is replaced by the whole text you send "
                      "(keep the template's structure); JSON memory is merged with the object you send "
                      "(null deletes a field). Refused when it breaks the template or schema rules.")
    async def update_working_memory(ctx: Context, working_memory: str | dict[str, Any], thread: str | None = None,
                                    resource: ResourceArg = None) -> dict[str, Any]:
        caller = _caller(server, ctx.request_context)
        return await run(lambda: tools.update_working_memory(working_memory, thread, resource, caller=caller))

    @tool(description="Store a message in a thread of this user (created if new), so it is remembered "
                      "and found by search_memory later. If you may send the same call again (after a timeout "
                      "or a lost answer), give it an idempotency_key: a retry with the same key and arguments "
                      "stores nothing again and answers the first call's result (replayed: true).")
    async def remember(ctx: Context, text: str, thread: str, role: str = "user", title: str | None = None,
                       resource: ResourceArg = None, idempotency_key: IdempotencyKeyArg = None) -> dict[str, Any]:
        caller = _caller(server, ctx.request_context)
        return await run(lambda: tools.remember(text, thread, role, title, resource, idempotency_key, caller=caller))

    return made


def _register_transcripts(server: MCPServer, tools: MemoryTools) -> None:
    """The transcript resources: each thread's, read through a template."""
    # A thread id is a name, not a path: ".." or a leading "/" are ordinary characters of it (the SDK
    # decodes the percent-encoding before calling).
    @server.resource(URI_PREFIX + "{thread_id}", name="thread-transcript", mime_type="text/markdown",
                     description="A thread's transcript (Markdown)",
                     security=ResourceSecurity(exempt_params=frozenset({"thread_id"})))
    async def thread_transcript(thread_id: str, ctx: Context) -> str:
        caller = _caller(server, ctx.request_context, ResourceError)
        return await _call(lambda: tools.transcript(thread_id, caller=caller), ResourceError)


def build_server(tools: MemoryTools, *, log_level: str = "WARNING") -> MemoryMCPServer:
    """The server for ``tools``; ``log_level`` is what reaches stderr (the SDK's and ours)."""
    return MemoryMCPServer(tools, log_level=log_level)


async def run_stdio(server: MCPServer) -> None:
    """Serve over stdin/stdout with the SDK's transport, answering the requests it cannot parse (``_Answering``)."""
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs, with both sides wrapped
    with _stdin_wire() as wire:
        lines = _Lines(anyio.wrap_file(io.TextIOWrapper(wire, encoding="utf-8", errors="replace")))
        # (the SDK only iterates its stdin: _Lines is that much of an AsyncFile)
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            unanswered = _Unanswered(write_stream)
            await lowlevel.run(_Answering(read_stream, write_stream, unanswered, lines), unanswered,
                               lowlevel.create_initialization_options())


@contextmanager
def _stdin_wire() -> Iterator[BinaryIO]:
    """Standard input's wire, for the transport alone: while serving, descriptor 0 points at the null device, so a
    child process or a stray read gets end of file rather than a client's line (what the SDK does when it opens
    standard input itself; it is opened here so that ``_Lines`` sees each line). Where descriptors cannot be
    duplicated, standard input is read in place."""
    try:
        wire = os.dup(0)
    except OSError:
        yield sys.stdin.buffer
        return
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
    except OSError:
        os.close(wire)
        yield sys.stdin.buffer
        return
    try:  # (never closed: a reader thread may still be blocked on it when the session ends)
        yield os.fdopen(wire, "rb", closefd=False)
    finally:
        os.dup2(wire, 0)


class _Lines:
    """Standard input's lines as the SDK's transport reads them, each kept (``taken``) until ``_Answering`` takes
    the message the SDK made of it: the SDK reads a request whose id is neither a string nor an integer (``1.5``,
    ``true``, ``{}``, ``null``) as a notification without an id, so only the line tells it was a request. The SDK
    sends one item per line, in order, and reads the next line only when the last was taken, so at most two wait."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._read: deque[str] = deque()

    def taken(self) -> str | None:
        return self._read.popleft() if self._read else None

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._inner.readline()
        if not line:
            raise StopAsyncIteration
        self._read.append(line)
        return str(line)


class _Unanswered:
    """The stdio transport's write side, keeping the ids of the client's requests not answered yet.

    At the end of standard input the SDK ends the session and cancels the calls still running: a client that sent
    its requests and closed its write end (``printf '...' | memory-studio mcp``) read no answer to them, though a
    ``remember`` among them was saved (its worker thread ran to the end). ``_Answering`` notes each request it passes
    on (``asked``) and, at the end of input, waits here (``settled``) until each has been answered or the SDK has
    said it settled without an answer (a request the client cancelled: the SDK's ``on_request_unanswered``).
    Cancellations are not counted from the client's notices: one naming an id two requests share, or one answered
    already, or naming ``"7"`` for request 7, does not say which request (if any) the SDK cancelled."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._ids: dict[Any, int] = {}  # request id -> how many requests with it wait (a client may reuse one)
        self._settled = anyio.Event()
        self._settled.set()

    def asked(self, request_id: Any) -> None:
        self._ids[request_id] = self._ids.get(request_id, 0) + 1
        if self._settled.is_set():
            self._settled = anyio.Event()

    def answered(self, request_id: Any) -> None:
        left = self._ids.pop(request_id, 0) - 1
        if left > 0:
            self._ids[request_id] = left
        if not self._ids:
            self._settled.set()

    def noted(self, item: Any) -> Any:
        """``item`` (a message the client sent), noted when it is a request, with a hook the SDK runs when that
        request settles without an answer (stdio's messages carry no metadata of their own)."""
        from mcp.shared.message import ServerMessageMetadata, SessionMessage
        from mcp_types import JSONRPCRequest

        message = getattr(item, "message", None)
        if not isinstance(message, JSONRPCRequest) or getattr(item, "metadata", None) is not None:
            return item
        self.asked(message.id)

        async def unanswered() -> None:
            self.answered(message.id)

        return SessionMessage(message, metadata=ServerMessageMetadata(on_request_unanswered=unanswered))

    async def settled(self) -> None:
        await self._settled.wait()

    async def send(self, item: Any) -> None:
        from mcp_types import JSONRPCError, JSONRPCResponse

        message = getattr(item, "message", None)
        try:
            await self._inner.send(item)
        finally:  # (a write that failed answers nothing more later: the wait ends either way)
            if isinstance(message, (JSONRPCResponse, JSONRPCError)) and message.id in self._ids:
                self.answered(message.id)

    async def aclose(self) -> None:
        self._ids.clear()
        self._settled.set()
        await self._inner.aclose()

    def close(self) -> None:
        self._ids.clear()
        self._settled.set()
        self._inner.close()

    async def __aenter__(self) -> _Unanswered:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Answering:
    """The stdio transport's read side, answering a request whose line the SDK's parser refused.

    JSON allows a lone surrogate escape (``"\\ud800"``; JavaScript's ``JSON.stringify`` writes one for a
    broken string), which the SDK's parser refuses: over HTTP the client gets a parse error, but over stdio
    the refusal only reached the server's log, and the client waited for an answer that never came. Such a
    request (still JSON to Python's parser, so its id is known) gets an error naming the character; with ``lines``
    (``_Lines``), a request whose id is no string or integer, which the SDK took for a notification, gets one with a
    null id (``_id_refusal``); anything else passes through as the SDK gave it. With ``unanswered``
    (``_Unanswered``), the end of input is reported only once every request passed on has been answered.
    """

    def __init__(self, inner: Any, write: Any, unanswered: _Unanswered | None = None,
                 lines: _Lines | None = None) -> None:
        self._inner, self._write, self._unanswered, self._lines = inner, write, unanswered, lines

    @property
    def last_context(self) -> Any:  # the sender's context, which the SDK reads from its stream
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            try:
                item = await self._inner.receive()
            except anyio.EndOfStream:
                if self._unanswered is not None:
                    await self._unanswered.settled()
                raise
            line = self._lines.taken() if self._lines is not None else None
            if isinstance(item, Exception):
                replies = _refusals(item)
            else:
                refused = _id_refusal(item, line)
                replies = [refused] if refused is not None else []
            if not replies:
                return self._unanswered.noted(item) if self._unanswered is not None else item
            for reply in replies:
                await self._write.send(reply)

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _id_refusal(item: Any, line: str | None) -> Any:
    """The error answering a request whose id is neither a string nor an integer (``line``: what the client sent),
    which the SDK read as a notification (``item``) and ran as one or dropped, so the client waited for good. JSON-RPC
    answers an id it cannot use with ``"id": null``; nothing of the request is run. None for anything else."""
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError, JSONRPCNotification

    if line is None or not isinstance(getattr(item, "message", None), JSONRPCNotification) or '"' not in line:
        return None
    try:
        sent = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(sent, dict) or "id" not in sent or _is_id(sent["id"]):
        return None
    named = shown(sent.get("method"))  # (a string: the SDK read a notification of it)
    log.warning("refused request %s: its id is %s", named, json_kind(sent["id"]))
    message = (f"The request {named} has {json_kind(sent['id'])} as its id: MCP takes a string or an integer as a "
               "request's id (and no id at all on a notification). Send the request again with such an id. Nothing "
               "was run or saved.")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=-32600, message=message)))


#: How many requests of one batch line ``_refusals`` answers (each with an error): a line of a million is answered
#: for the first ones, the rest as the SDK leaves them (unanswered), so a hostile line costs no more than this.
MOST_BATCH_ANSWERS = 1_000


def _refusals(exc: Exception) -> list[Any]:
    """The JSON-RPC errors answering a request line the SDK's parser refused: one for a request, one per request
    of a batch (a JSON array, which MCP since 2025-06-18 does not take and the SDK dropped without a word, so a
    client waited for its answers for good); none when no request with an id is found (nothing can be answered)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return []
    errors = exc.errors()
    inputs = [e.get("input") for e in errors]
    line = next((i for i in inputs if isinstance(i, str)), None)
    if line is None:  # the SDK read the JSON and refused its shape: a batch is a list
        batch = next((i for i in inputs if isinstance(i, list)), None)
        return _batch_refusals(batch) if batch is not None else []
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):  # too deep or too large for Python too: find the id by scanning
        keys, request_id = _top_level(line)
        request = {"id": request_id, "method": None} if "method" in keys and request_id is not None else None
    if isinstance(request, list):
        return _batch_refusals(request)
    reply = _refusal(request, errors)
    return [reply] if reply is not None else []


def _batch_refusals(batch: list[Any]) -> list[Any]:
    """An error for each request of a batch (its first ``MOST_BATCH_ANSWERS`` messages), saying to send them one
    per line; notifications in it get none, as JSON-RPC has it."""
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError

    message = ("This server reads one JSON-RPC message per line: MCP (since 2025-06-18) has no batches. Send "
               "each request on a line of its own. Nothing was run or saved.")
    asked = [r["id"] for r in batch[:MOST_BATCH_ANSWERS] if isinstance(r, dict) and _is_id(r.get("id")) and "method" in r]
    if asked:
        log.warning("refused a batch of %d message(s): MCP takes one message per line", len(batch))
    return [SessionMessage(JSONRPCError(jsonrpc="2.0", id=i, error=ErrorData(code=-32600, message=message)))
            for i in asked]


def _refusal(request: Any, errors: Any) -> Any:
    """The JSON-RPC error answering one request the SDK's parser refused (``errors``: its reasons), or None (not a
    request, or no id: nothing can be answered)."""
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError

    if not isinstance(request, dict) or not _is_id(request.get("id")) or "method" not in request:
        return None
    problem = lone_surrogate(request)
    if problem is not None:
        log.warning("refused request %r: it holds %s", request["id"], problem)
        message = (f"The request holds {problem}; decode the text properly (or replace the character) before "
                   "sending it. Nothing was run or saved.")
        return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request["id"], error=ErrorData(code=-32602,
                                                                                            message=message)))
    # The SDK's JSON reader refused the line (nested too deeply, a number out of its range, not JSON): over stdio
    # that went to the log only and the client waited for good. (Python's reader may have managed where it did not.)
    why = next((str(e.get("msg")) for e in errors if e.get("msg")), "it is not valid JSON")
    why = why.removeprefix("Invalid JSON: ")
    log.warning("refused request %r: %s", request["id"], why)
    message = (f"The request could not be read ({why}): send it as plain JSON, with arguments nested less deeply "
               "and numbers of ordinary size. Nothing was run or saved.")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request["id"], error=ErrorData(code=-32700, message=message)))


def _is_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+', re.S)


def _top_level(line: str) -> tuple[set[str], Any]:
    """The keys of the top-level object of a JSON line no parser would read whole (nested past any
    recursion limit), and its ``id`` (None when absent or not a plain value): tokens are scanned with their
    depth, nothing is built."""
    depth, key, pending = 0, None, None
    keys: set[str] = set()
    request_id: Any = None
    for match in _TOKEN.finditer(line):
        token = match.group()
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif depth != 1:
            continue
        elif token == ":":
            key, pending = pending, None
            if isinstance(key, str):
                keys.add(key)
        elif token == ",":
            key = pending = None
        elif key == "id":
            try:
                request_id = json.loads(token)
            except ValueError:
                request_id = None
            key = None
        elif token.startswith('"'):
            try:
                pending = json.loads(token)
            except ValueError:
                pending = None
    return keys, request_id if _is_id(request_id) else None


#: The most MCP sessions open at once (the SDK's own default): a request that would open another gets 503 until one
#: ends or expires; ``SessionOwners`` keeps no more owners than this either.
MAX_SESSIONS = 10_000
#: Seconds without a request after which the SDK ends a session (its own default).
SESSION_IDLE_SECONDS = 30 * 60


def http_app(server: MCPServer, policy: Any, *, session_idle_timeout: float = SESSION_IDLE_SECONDS,
             max_sessions: int = MAX_SESSIONS) -> Any:
    """The streamable-HTTP ASGI app at ``/mcp``, behind ``RequestGuard(policy)`` (outermost)."""
    from core.gateway.guard import RequestGuard

    # DNS-rebinding protection is the guard's (Host and Origin, as for the gateway): the SDK's own
    # copy of those rules stays off, so there is one set of rules and one error shape.
    from mcp.server.transport_security import TransportSecuritySettings

    # The body limit is the guard's too (--max-body-mb, a JSON 413 naming the flag): the SDK's own,
    # 4 MB by default, would otherwise refuse bodies the flag allows, in plain text.
    if isinstance(server, MemoryMCPServer):
        server.over_http = True
    app = server.streamable_http_app(
        streamable_http_path="/mcp", host=policy.host or "127.0.0.1", max_request_body_size=policy.max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False), max_sessions=max_sessions,
        session_idle_timeout=session_idle_timeout)
    manager = server.session_manager
    return RequestGuard(SessionOwners(app, live=lambda: getattr(manager, "_server_instances", None),
                                      limit=max_sessions), policy)


#: The streamable-HTTP transport's session header.
SESSION_HEADER = b"mcp-session-id"


class SessionOwners:
    """ASGI middleware between the guard and the SDK's streamable-HTTP app: an MCP session is used only by the token
    that opened it.

    The SDK keeps a session per ``Mcp-Session-Id`` and serves whoever names it: another token that learnt the id
    could end the session (``DELETE``), open its stream of server messages (``GET``), or post requests into it with
    the ids of the owner's requests. Each call's caller is still its own request's token (``_caller``), so no
    memory crossed; but a session is one client's. Here the session an ``initialize`` answer opens is noted with its
    token's entry (the shared token's callers are one), and a request naming a session another token opened, or one
    not noted here, is answered as a session that does not exist (404, the spec's cue to start a new one), before
    the SDK sees it.

    An owner is kept while its session lives, no longer: forgotten when its owner ends it (``DELETE``), when the SDK
    answers the session is gone (404), and, as a new session is noted, when the SDK's session manager no longer
    holds it (``live``: its table of open sessions, ended by an idle timeout or a crash). At most ``limit`` owners
    are kept (the SDK opens no more sessions than that): past it the oldest is forgotten, which ends that session
    for its owner too (a session not noted is refused), never opens it to another token."""

    def __init__(self, app: Any, *, live: Callable[[], Any] | None = None, limit: int = 10_000) -> None:
        self.app = app
        self.owners: dict[str, str | None] = {}  # in the order noted, oldest first
        self.live = live
        self.limit = limit

    def _note(self, session: str, who: str | None) -> None:
        live = self.live() if self.live is not None else None
        if live is not None and len(self.owners) >= len(live):
            # Sessions the SDK ended (idle timeout, crash) are forgotten here (one pass, only when some may be).
            self.owners = {s: o for s, o in self.owners.items() if s in live}
        self.owners[session] = who
        while len(self.owners) > self.limit:
            del self.owners[next(iter(self.owners))]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        who = caller_of(scope).name
        session = _header(scope.get("headers", ()), SESSION_HEADER)
        if session is not None and (session not in self.owners or self.owners[session] != who):
            if session in self.owners:
                log.warning("refused a request naming an MCP session another token opened")
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": (
                "Session not found for this token (it ended, expired, or another token opened it: an MCP session is "
                "used only by the token that opened it). Start a new session (initialize) with your own token; "
                "nothing was run.")}}).encode()
            await send({"type": "http.response.start", "status": 404, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return

        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start" and session is None:
                opened = _header(message.get("headers", ()), SESSION_HEADER)
                if opened is not None:
                    self._note(opened, who)
            elif message["type"] == "http.response.start" and session is not None and (
                    message["status"] == 404 or (scope["method"] == "DELETE" and 200 <= message["status"] < 300)):
                self.owners.pop(session, None)  # ended by its owner, or gone from the SDK (expired)
            await send(message)

        await self.app(scope, receive, noting)


def _header(headers: Any, name: bytes) -> str | None:
    """The first ``name`` header of ASGI ``headers`` (as Starlette, and so the SDK, reads it)."""
    return next((value.decode("latin-1") for key, value in headers if key.lower() == name), None)
