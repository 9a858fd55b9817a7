"""The memory API: threads, messages and working memory, read and written through ``Memory``.

- ``GET /api/memory/threads?resourceId=`` → ``{threads, total, page, perPage, hasMore}``
- ``GET /api/memory/threads/{id}/messages?resourceId=&page=&perPage=`` → the newest ``perPage``
  messages (oldest first), page 0 being the newest, and ``unreadable``: stored rows skipped because
  they do not parse
- ``GET /api/memory/threads/{id}/working-memory?resourceId=`` → ``{workingMemory, format, scope,
  threadExists}``
- ``PUT /api/memory/threads/{id}/working-memory?resourceId=`` with ``{"workingMemory": ...}``
  (Markdown text, or an object for schema working memory)

``agentId=`` picks whose memory is meant when the agents do not share one. Every route needs
``resourceId=`` (400 without it; a tokens file's token with one resource may leave it out): a call
is always about one resource's memory, and a ``resourceId`` that does not own the thread gets 403,
exactly as a chat turn would, as does one the caller's token may not use (``resource_not_allowed``). A thread id may hold any character,
``/`` included, when percent-encoded. Every call runs on a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.gateway.access import caller_of
from core.gateway.errors import GatewayError, bad_request
from core.gateway.openai_routes import read_json
from core.gateway.turns import client_id
from core.ids import lone_surrogate, shown
from core.memory import Memory
from core.scopes import check_caller_owns
from core.working_memory_schema import WorkingMemoryError

if TYPE_CHECKING:  # pragma: no cover
    from core.gateway.app import Gateway

T = TypeVar("T")
MAX_PER_PAGE = 1000


async def _run(request: Request, fn: Callable[[], T]) -> T:
    gateway: Gateway = request.app.state.gateway
    return await anyio.to_thread.run_sync(fn, limiter=gateway.memory_limiter)


def _memory(request: Request, resource_id: str, *, working_memory: bool = False) -> Memory:
    gateway: Gateway = request.app.state.gateway
    context = {"resourceId": resource_id, "threadId": request.path_params.get("thread_id"), "source": "gateway"}
    return gateway.registry.memory_for(request.query_params.get("agentId"), context, working_memory=working_memory)


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{name} must be a whole number, got {shown(raw)}.", param=name) from None
    if not low <= value <= high:
        raise bad_request(f"{name} must be between {low} and {high}, got {shown(value)}.", param=name)
    return value


def _resource(request: Request, what: str) -> str:
    """The ``resourceId`` every memory call needs: without one, any thread could be read or written. The
    caller's token must allow it; a token with one resource may leave it out."""
    named = request.query_params.get("resourceId") or None
    resource_id = caller_of(request.scope).resource_for(named, param="resourceId")
    if not resource_id:
        raise bad_request(f"Say whose {what} this is about: add ?resourceId=<the resource that owns it>.",
                          param="resourceId")
    return resource_id


async def list_threads(request: Request) -> Response:
    resource_id = _resource(request, "threads")
    page = _int(request, "page", 0, 0, 1_000_000)
    per_page = _int(request, "perPage", 100, 1, MAX_PER_PAGE)
    memory = _memory(request, resource_id)
    result = await _run(request, lambda: memory.list_threads(resource_id=resource_id, page=page, per_page=per_page))
    return JSONResponse({"threads": [t.to_dict() for t in result.threads], "total": result.total,
                         "page": result.page, "perPage": result.per_page, "hasMore": result.has_more})


async def list_messages(request: Request) -> Response:
    thread_id = request.path_params["thread_id"]
    resource_id = _resource(request, "messages")
    page = _int(request, "page", 0, 0, 1_000_000)
    per_page = _int(request, "perPage", 100, 1, MAX_PER_PAGE)
    memory = _memory(request, resource_id)

    def read() -> Any:
        thread = memory.get_thread(thread_id)
        if thread is not None:  # (the engine's own check lets a thread without an owner through)
            check_caller_owns(thread_id, thread.resource_id or "", resource_id)
        return memory.recall(thread_id=thread_id, resource_id=resource_id, page=page, per_page=per_page)

    result = await _run(request, read)
    return JSONResponse({"messages": [{**m.to_dict(), "text": m.text} for m in result.messages],
                         "total": result.total, "page": result.page, "perPage": result.per_page,
                         "hasMore": result.has_more, "unreadable": [u.to_dict() for u in result.unreadable]})


async def get_working_memory(request: Request) -> Response:
    thread_id = request.path_params["thread_id"]
    asked = _resource(request, "working memory")
    memory = _memory(request, asked, working_memory=True)

    def read() -> dict[str, Any]:
        opts = _wm_options(memory)
        thread = memory.get_thread(thread_id)
        resource_id = _owner(thread_id, (thread.resource_id or "") if thread else None, asked)
        value = memory.working_memory_service.get(opts, thread_id=thread_id, resource_id=resource_id)
        return {"workingMemory": value.data if value.text is not None else None, "format": value.format,
                "scope": value.scope, "threadExists": thread is not None, "resourceId": resource_id}

    return JSONResponse(await _run(request, read))


async def put_working_memory(request: Request) -> Response:
    thread_id = request.path_params["thread_id"]
    asked = _resource(request, "working memory")
    # A write may create the resource's row: its id follows the rule a chat turn's ids follow, so the
    # gateway never makes a resource that no chat request could name (control characters, 5,000 characters).
    client_id("resourceId", asked)
    memory = _memory(request, asked, working_memory=True)
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

    def write() -> dict[str, Any]:
        opts = _wm_options(memory)
        thread = memory.get_thread(thread_id)
        resource_id = _owner(thread_id, (thread.resource_id or "") if thread else None, asked)
        if thread is None and opts.scope == "thread":  # the engine's refusal says only "not found"
            raise GatewayError(404, f"There is no thread {shown(thread_id)}, and this memory keeps working memory per "
                               "thread: start the thread with a chat turn (metadata.thread_id) first, then write "
                               "its working memory. Nothing was written.", type="not_found_error", code="not_found")
        memory.update_working_memory(thread_id=thread_id, resource_id=resource_id,
                                     working_memory=body["workingMemory"], author=author)
        value = memory.working_memory_service.get(opts, thread_id=thread_id, resource_id=resource_id)
        return {"workingMemory": value.data, "format": value.format, "scope": value.scope,
                "threadExists": thread is not None, "resourceId": resource_id}

    return JSONResponse(await _run(request, write))


def _wm_options(memory: Memory) -> Any:
    opts = memory.effective_options().working_memory
    if not opts.enabled:
        raise WorkingMemoryError("Working memory is not enabled for this agent's memory.")
    return opts


def _owner(thread_id: str, owner: str | None, asked: str) -> str:
    """The resource a working-memory call is about: the asker, who must own the thread if it exists."""
    check_caller_owns(thread_id, owner, asked)
    return asked


def routes() -> list[Route]:
    return [
        Route("/api/memory/threads", list_threads, methods=["GET"]),
        Route("/api/memory/threads/{thread_id:path}/messages", list_messages, methods=["GET"]),
        Route("/api/memory/threads/{thread_id:path}/working-memory", get_working_memory, methods=["GET"]),
        Route("/api/memory/threads/{thread_id:path}/working-memory", put_working_memory, methods=["PUT"]),
    ]
