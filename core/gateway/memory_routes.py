"""The memory API: threads, messages and working memory, read and written through ``Memory``.

- ``GET /api/memory/threads?resourceId=&perPage=&cursor=`` → ``{threads, total, page, perPage, hasMore,
  nextCursor}``, newest created first: pass ``nextCursor`` back as ``cursor`` for the next page (a keyset,
  ``core.gateway.cursors``: threads created between two reads move no page). ``page=`` (an offset) still works
  for clients that use it, but a thread created meanwhile shifts its pages (one shown twice); not with ``cursor``
- ``GET /api/memory/threads/{id}/messages?resourceId=&perPage=&cursor=`` → the newest ``perPage``
  messages (oldest first), ``unreadable``: stored rows skipped because they do not parse, and ``nextCursor``:
  pass it back as ``cursor`` for the ``perPage`` before them (older), which messages stored meanwhile do not
  move. ``page=`` (0 the newest) still works, but a message stored between two reads shifts its pages
- ``GET /api/memory/threads/{id}/working-memory?resourceId=`` → ``{workingMemory, format, scope,
  threadExists}``
- ``PUT /api/memory/threads/{id}/working-memory?resourceId=`` with ``{"workingMemory": ...}``
  (Markdown text, or an object for schema working memory); an ``Idempotency-Key`` header makes a repeat
  of the same write answer the first one's result (``core.gateway.idempotency``)

Both answer an ``ETag`` naming the stored value (a hash of its text; ``"none"`` when there is none). A PUT
with ``If-Match: <that ETag>`` writes only if the value is still the one read, and answers 412
``precondition_failed`` (with the value's ETag now) when an agent or another client changed it meanwhile,
so a read-edit-write client never overwrites a change it did not see; ``If-Match: *`` writes only over an
existing value, ``If-None-Match: *`` only where there is none. A GET with ``If-None-Match: <that ETag>`` is
answered 304 while the value is unchanged. A conditional header sent on several lines is one comma-joined list
(``core.gateway.conditional``, which reads them all). Without them a PUT replaces the value as Mastra's API does.

``agentId=`` picks whose memory is meant when the agents do not share one. Every route needs
``resourceId=`` (400 without it; a tokens file's token with one resource may leave it out): a call
is always about one resource's memory. A thread the ``resourceId`` does not own (another resource's, or one
stored without an owner) is answered as a thread that does not exist: 404 for its messages (the same words), its
working memory as a thread not stored yet's (per thread: none, a PUT 404; per resource: the resource's own), so
reading tells no token which ids exist elsewhere. A ``resourceId`` the caller's token may not use is 403
(``resource_not_allowed``). A thread id may hold any character,
``/`` included, when percent-encoded. Every call runs on a worker thread.

A resource's delegations are its memory too: ``resourceId=delegation:<resource>:<agent>`` (the id a
delegation's tool result names, ``core.scopes.delegation_resource``) reads and writes what the sub-agent
keeps of that resource's turns, for a caller that may use ``<resource>`` (``Caller.check(...,
delegations=True)``); another resource's delegation is 403, a malformed one 400 ``reserved_resource``.

- ``GET /api/memory/delegations?resourceId=&page=&perPage=`` → ``{resourceId, delegations: [{resourceId, label,
  agents, threads}], total, page, perPage, hasMore}``: a page (``perPage`` threads, 100 unless said, at most
  1,000) of the threads of the resource's delegations (nested ones too), newest created first, grouped per
  delegation (a thread's fields as in the thread list, with ``messageCount`` and ``lastActivity``), so a
  client finds them without knowing their ids; ``total`` counts the threads; ``nextCursor`` and ``cursor=`` as
  in the thread list. The same ``resourceId`` rule as every route: a token lists its own
  resources' delegations only (403 for another's), the shared and ``"*"`` tokens any resource's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.gateway import cursors
from core.gateway.access import (breaks_id_rule, caller_of, check_named_resource, has_rows, no_such_thread,
                                 sees_thread, still_the_thread)
from core.gateway.conditional import IF_MATCH, IF_NONE_MATCH, Conditions, etag, precondition_failed
from core.gateway.errors import GatewayError, bad_request
from core.gateway.idempotency import Claim, Replay, key_of, request_hash, scope_of, single_header
from core.gateway.openai_routes import holding, read_json, replay_json, sweep_task
from core.gateway.turns import client_thread
from core.ids import lone_surrogate, shown
from core.memory import Memory
from core.scopes import delegation_chain, delegation_label, delegation_root, is_delegation_resource
from core.timeutil import parse_iso, to_iso
from core.working_memory import ConcurrentUpdateError, WorkingMemoryValue
from core.working_memory_schema import WorkingMemoryError

if TYPE_CHECKING:  # pragma: no cover
    from core.gateway.app import Gateway

T = TypeVar("T")
MAX_PER_PAGE = 1000


async def _run(request: Request, fn: Callable[[], T]) -> T:
    gateway: Gateway = request.app.state.gateway
    return await anyio.to_thread.run_sync(fn, limiter=gateway.memory_limiter)


def _memory(request: Request, resource_id: str, *, working_memory: bool = False) -> Memory:
    """The memory the call is about. A memory factory gets the request context a chat turn would; for a
    delegation's resource, the resource its turns ran for (``delegation_root``): the delegation ran on the
    memory of that resource's turn, never on one a factory would make for the delegation's own id."""
    gateway: Gateway = request.app.state.gateway
    owner = delegation_root(resource_id) if is_delegation_resource(resource_id) else resource_id
    context = {"resourceId": owner or resource_id, "threadId": request.path_params.get("thread_id"),
               "source": "gateway"}
    return gateway.registry.memory_for(_param(request, "agentId"), context, working_memory=working_memory)


def _param(request: Request, name: str) -> str | None:
    """Query parameter ``name``, or None; 400 when it was sent twice with different values (``single_header``)."""
    return single_header(request.query_params, name, kind="query parameter")


#: A whole number as a query parameter: ASCII digits, perhaps a minus (``int`` also takes "1_0", " 1" and other
#: scripts' digits, which a proxy or log in front reads otherwise, or not as a number at all).
_WHOLE = re.compile(r"-?[0-9]+")


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = _param(request, name)
    if raw is None or raw == "":
        return default
    if not _WHOLE.fullmatch(raw):
        raise bad_request(f"{name} must be a whole number written in the digits 0-9, got {shown(raw)}.", param=name)
    value = int(raw) if len(raw) <= 20 else None  # (int reads no more than 4,300 digits)
    if value is None or not low <= value <= high:
        raise bad_request(f"{name} must be between {low} and {high}, got {shown(raw if value is None else value)}.",
                          param=name)
    return value


async def _named(request: Request, memory: Memory, resource_id: str) -> None:
    """``check_named_resource`` for the ``resourceId`` sent: 400 for an id no client could name (over 256
    characters, an escape sequence...) unless something is stored under it, as a chat turn refuses it."""
    if breaks_id_rule(resource_id):  # (only then is the database read, on a worker thread)
        await _run(request, lambda: check_named_resource("resourceId", resource_id, lambda r: has_rows(memory, r)))


def _resource(request: Request, what: str) -> str:
    """The ``resourceId`` every memory call needs: without one, any thread could be read or written. The
    caller's token must allow it; a token with one resource may leave it out."""
    named = _param(request, "resourceId") or None
    # A delegation of a resource the caller may use is that resource's memory (``Caller.check``).
    resource_id = caller_of(request.scope).resource_for(named, param="resourceId", delegations=True)
    if not resource_id:
        raise bad_request(f"Say whose {what} this is about: add ?resourceId=<the resource that owns it>.",
                          param="resourceId")
    return resource_id


def _after(request: Request, kind: str, listing: tuple[Any, ...], page: int, what: str) -> tuple[str, str] | None:
    """Where a keyset page starts (``cursor=``, ``core.gateway.cursors``), or None for the first page or ``page=``.
    ``listing``: whose list it is (``_listing``, and for messages the thread)."""
    cursor = _param(request, "cursor")
    if not cursor:
        return None
    if page:
        raise bad_request(f"Give cursor or page, not both: cursor continues the {what} where the page before "
                          "ended; page counts from the first page.", param="page")
    return cursors.read(cursor, kind, listing, what=what)


def _listing(request: Request, resource_id: str) -> tuple[Any, ...]:
    """Whose list a cursor continues: the resource and the agent whose memory it is."""
    return resource_id, _param(request, "agentId")


async def list_threads(request: Request) -> Response:
    resource_id = _resource(request, "threads")
    page = _int(request, "page", 0, 0, 1_000_000)
    per_page = _int(request, "perPage", 100, 1, MAX_PER_PAGE)
    after = _after(request, "threads", _listing(request, resource_id), page, "thread list")
    memory = _memory(request, resource_id)
    await _named(request, memory, resource_id)
    result = await _run(request, lambda: memory.list_threads(resource_id=resource_id, page=page, per_page=per_page,
                                                             after=after))
    next_cursor = cursors.issue("threads", _listing(request, resource_id), result.last_key) \
        if result.has_more and result.last_key else None
    return JSONResponse({"threads": [t.to_dict() for t in result.threads], "total": result.total,
                         "page": result.page, "perPage": result.per_page, "hasMore": result.has_more,
                         "nextCursor": next_cursor})


async def list_delegations(request: Request) -> Response:
    """The resource's delegations (``Memory.delegation_threads``), each with its threads, so a caller that may
    use the resource finds what its sub-agents keep without knowing their ids; never another resource's. A page
    (``page``, ``perPage``) of their threads at a time, newest created first (``Memory.delegation_thread_page``),
    grouped per delegation, with ``total`` threads and ``hasMore``."""
    resource_id = _resource(request, "delegations")
    page = _int(request, "page", 0, 0, 1_000_000)
    per_page = _int(request, "perPage", 100, 1, MAX_PER_PAGE)
    after = _after(request, "delegations", _listing(request, resource_id), page, "delegation list")
    memory = _memory(request, resource_id)
    await _named(request, memory, resource_id)
    found = await _run(request, lambda: memory.delegation_thread_page(resource_id, page=page, per_page=per_page,
                                                                      after=after))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for s in found.rows:  # a delegation where its newest thread of the page is
        grouped.setdefault(s.thread.resource_id, []).append(
            {**s.thread.to_dict(), "messageCount": s.message_count,
             "lastActivity": to_iso(s.last_activity) if s.last_activity else None})
    delegations = []
    for delegated, threads in grouped.items():
        chain = delegation_chain(delegated)
        delegations.append({"resourceId": delegated, "label": delegation_label(delegated),
                            "agents": list(chain[1]) if chain else [], "threads": threads})
    next_cursor = cursors.issue("delegations", _listing(request, resource_id), found.last_key) \
        if found.has_more and found.last_key else None
    return JSONResponse({"resourceId": resource_id, "delegations": delegations, "total": found.total, "page": page,
                         "perPage": per_page, "hasMore": found.has_more, "nextCursor": next_cursor})


async def list_messages(request: Request) -> Response:
    thread_id = request.path_params["thread_id"]
    resource_id = _resource(request, "messages")
    page = _int(request, "page", 0, 0, 1_000_000)
    per_page = _int(request, "perPage", 100, 1, MAX_PER_PAGE)
    listing = (*_listing(request, resource_id), thread_id)
    key = _after(request, "messages", listing, page, "thread's messages")
    before = (parse_iso(key[0]), key[1]) if key is not None else None
    memory = _memory(request, resource_id)
    await _named(request, memory, resource_id)

    def read() -> Any:
        thread = memory.get_thread(thread_id)
        # 404, even where resource-scoped recall lets ``recall`` read a thread not stored yet; another resource's
        # thread (or one without an owner) the same 404, so reading tells no token which ids exist elsewhere.
        if thread is None or not sees_thread(thread.resource_id, resource_id):
            client_thread("thread_id", thread_id)  # (an id no client could name: 400 saying why, not 404)
            raise no_such_thread(thread_id, resource_id)
        read = memory.recall(thread_id=thread_id, resource_id=resource_id, page=page, per_page=per_page, before=before)
        if not still_the_thread(memory, thread):  # (deleted, and maybe another resource's now, while it was read)
            raise no_such_thread(thread_id, resource_id)
        return read

    result = await _run(request, read)
    oldest = result.oldest_key
    next_cursor = cursors.issue("messages", listing, (to_iso(oldest[0]), oldest[1])) \
        if result.has_more and oldest is not None else None
    return JSONResponse({"messages": [{**m.to_dict(), "text": m.text} for m in result.messages],
                         "total": result.total, "page": result.page, "perPage": result.per_page,
                         "hasMore": result.has_more, "unreadable": [u.to_dict() for u in result.unreadable],
                         "nextCursor": next_cursor})


async def get_working_memory(request: Request) -> Response:
    thread_id = request.path_params["thread_id"]
    asked = _resource(request, "working memory")
    conditions = Conditions.of(request.headers)
    memory = _memory(request, asked, working_memory=True)
    await _named(request, memory, asked)

    def read() -> tuple[dict[str, Any], str | None]:
        opts = _wm_options(memory)
        thread = _seen(memory, thread_id, asked)
        if thread is None and opts.scope == "thread":
            # No thread this resource may read: the answer to a thread not stored yet, read from nowhere (another
            # resource's thread holds its own working memory).
            value = WorkingMemoryValue("thread", thread_id, None, opts.mode)
        else:
            value = memory.working_memory_service.get(opts, thread_id=thread_id if thread else None, resource_id=asked)
            if thread is not None and not still_the_thread(memory, thread):
                # Deleted, and maybe another resource's now, while it was read: as above (per resource: its own).
                thread = None
                if opts.scope == "thread":
                    value = WorkingMemoryValue("thread", thread_id, None, opts.mode)
        return {"workingMemory": value.data if value.text is not None else None, "format": value.format,
                "scope": value.scope, "threadExists": thread is not None, "resourceId": asked}, value.text

    data, text = await _run(request, read)
    if not conditions.allow(text, reading=True):
        return Response(status_code=304, headers={"ETag": etag(text)})  # If-None-Match: the client's copy is current
    return JSONResponse(data, headers={"ETag": etag(text)})


#: The working-memory write as idempotency keys are scoped to it.
PUT_WM_ROUTE = "PUT /api/memory/threads/{thread_id}/working-memory"


async def put_working_memory(request: Request) -> Response:
    thread_id = request.path_params["thread_id"]
    key = key_of(request.headers)
    asked = _resource(request, "working memory")
    memory = _memory(request, asked, working_memory=True)
    # A write may create the resource's row: the rule every memory route and MCP tool follows, so the gateway never
    # makes a resource no chat request could name (control characters, 5,000 characters), while a resource another
    # tool stored under such an id stays writable by its owner.
    await _named(request, memory, asked)
    body = await read_json(request)
    if not isinstance(body, Mapping) or "workingMemory" not in body:
        raise bad_request('Send {"workingMemory": ...}: Markdown text, or an object for schema working memory.',
                          param="workingMemory")
    # Refused here, naming the character: the driver's own refusal names the server's database file and no
    # character in particular.
    problem = lone_surrogate(body["workingMemory"])
    if problem is not None:
        raise bad_request(f"The working memory holds {problem}; decode the text properly (or replace the character) "
                          "before sending it. Nothing was written.", param="workingMemory")

    # The version's author: the tokens file entry that wrote it (its name, never the token), as traces show.
    caller = caller_of(request.scope)
    author = "gateway" if caller.name is None else f"gateway: {caller.name}"

    conditions = Conditions.of(request.headers)
    gateway: Gateway = request.app.state.gateway

    def write(claim: Claim | None = None) -> tuple[dict[str, Any], str | None]:
        """The write; with ``claim``, its answer is kept for the key in the write's own transaction."""
        opts = _wm_options(memory)
        thread = _seen(memory, thread_id, asked)
        resource_id = asked
        # Through a thread this resource may not see, a write is one through a thread not stored yet: per thread a
        # 404, per resource the resource's own working memory (never the other thread's), the same words both ways.
        written_through = thread_id if thread is not None else None
        if thread is None and opts.scope == "thread":  # the engine's refusal says only "not found"
            raise GatewayError(404, f"There is no thread {shown(thread_id)} for resource {shown(asked)}, and this "
                               "memory keeps working memory per thread: start the thread with a chat turn "
                               "(metadata.thread_id) first, then write its working memory. Nothing was written.",
                               type="not_found_error", code="not_found")
        expected: str | None | object = ...
        if conditions.any:
            # The value read now must meet the client's conditions (If-Match: the one it read; If-None-Match: *,
            # none); the write then checks that it is still that value, in its own transaction (``expected``), so
            # a change in between is refused too.
            current = memory.working_memory_service.get(opts, thread_id=written_through, resource_id=resource_id).text
            conditions.allow(current, reading=False)
            expected = current

        def answer(value: Any) -> tuple[dict[str, Any], str | None]:
            return {"workingMemory": value.data, "format": value.format, "scope": value.scope,
                    "threadExists": thread is not None, "resourceId": resource_id}, value.text

        def kept(value: Any) -> dict[str, Any]:
            data, text = answer(value)
            return {"kind": "json", "status": 200, "body": data, "headers": {"ETag": etag(text)}}

        # The key's row names the thread only when this resource's (``written_through``): never another's id.
        writes = [] if claim is None else [gateway.keeper.saved_with(claim, kept, thread_id=written_through)]
        try:
            memory.update_working_memory(thread_id=written_through, resource_id=resource_id,
                                         working_memory=body["workingMemory"], author=author, expected=expected,
                                         _writes=writes)
        except ConcurrentUpdateError as exc:
            raise precondition_failed(exc.current, IF_MATCH if conditions.if_match is not None else IF_NONE_MATCH) \
                from None
        return answer(memory.working_memory_service.get(opts, thread_id=written_through, resource_id=resource_id))

    if key is None:
        data, text = await _run(request, write)
        return JSONResponse(data, headers={"ETag": etag(text)})

    # With an Idempotency-Key (core.gateway.idempotency): the same thread, resource, memory, value and conditions
    # are the same request; its answer (or a 4xx it met, as a 412) is kept and answered to repeats. The answer is
    # kept in the write's own transaction, so a process that dies after the write has kept it too.
    digest = request_hash(route=PUT_WM_ROUTE, thread=thread_id, resource=asked, agent=_param(request, "agentId"),
                          body=body, **conditions.digest())
    scope = scope_of(caller, asked, PUT_WM_ROUTE)
    # No thread yet: the path's may be another resource's; ``write`` names it once it saw whose (``written_through``).
    got = await _run(request, lambda: gateway.keeper.claim(memory.store.db, scope=scope, key=key, digest=digest,
                                                           resource_id=asked, thread_id=None))
    if isinstance(got, Replay):
        return replay_json(got.outcome)
    claim: Claim = got

    async with holding(gateway.keeper, claim, gateway.memory_limiter):
        data, text = await _run(request, lambda: gateway.keeper.run(claim, lambda: write(claim)))
    return JSONResponse(data, headers={"ETag": etag(text)}, background=sweep_task(gateway, claim))


def _wm_options(memory: Memory) -> Any:
    opts = memory.effective_options().working_memory
    if not opts.enabled:
        raise WorkingMemoryError(
            "Working memory is not enabled for this agent's memory, so there is none to read or write (a memory's "
            "default, and what `memory-studio serve --model` serves without --working-memory). Start `serve --model` "
            "with --working-memory, serve agents whose memory enables it (`--agents`, "
            "MemoryOptions(working_memory={\"enabled\": True})), or name one with agentId=<agent>.")
    return opts


def _seen(memory: Memory, thread_id: str, asked: str) -> Any:
    """The stored thread when resource ``asked`` may read it (``sees_thread``), else None: a thread of another
    resource is answered as one not stored yet; 400 for an id no client could name (``client_thread``), as the
    chat route refuses it (a thread another tool stored under such an id stays readable by its resource)."""
    thread = memory.get_thread(thread_id)
    if thread is None or not sees_thread(thread.resource_id, asked):
        client_thread("thread_id", thread_id)  # (an id no client could name: 400 saying why)
        return None
    return thread


def routes() -> list[Route]:
    return [
        Route("/api/memory/threads", list_threads, methods=["GET"]),
        Route("/api/memory/delegations", list_delegations, methods=["GET"]),
        Route("/api/memory/threads/{thread_id:path}/messages", list_messages, methods=["GET"]),
        Route("/api/memory/threads/{thread_id:path}/working-memory", get_working_memory, methods=["GET"]),
        Route("/api/memory/threads/{thread_id:path}/working-memory", put_working_memory, methods=["PUT"]),
    ]
