"""OpenAI-compatible routes: ``POST /v1/chat/completions`` (plain and streamed) and ``GET /v1/models``.

``Agent.generate`` is synchronous, so every turn runs on a worker thread (``anyio.to_thread``)
and the event loop keeps serving other requests meanwhile. Nothing here takes a process-wide lock:
several gateway processes can serve one database, whose own transactions keep turns consistent.

A streamed reply is sent as server-sent events in OpenAI's ``chat.completion.chunk`` format and
ends with ``data: [DONE]``. The response status is chosen only once the turn's first event is known,
so an unknown thread owner or a failing model still gets its 403 or 502 rather than a 200 with
an error inside; an error after the first chunk arrives as an ``{"error": ...}`` event.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from core.gateway.access import caller_of
from core.gateway.errors import GatewayError, bad_request, classify
from core.gateway.idempotency import (
    REPLAYED_HEADER,
    Claim,
    Keeper,
    Replay,
    SavedOutcome,
    key_of,
    request_hash,
    scope_of,
)
from core.gateway.notices import notices_header
from core.gateway.turns import (
    TextDelta,
    Turn,
    TurnEvent,
    TurnFinished,
    finished,
    parse_turn,
    resolve_thread,
    run_turn,
    turn_events,
)
from core.memory import resolve_memory
from core.errors import MemoryStudioError
from core.llm.stopping import CallStop
from core.message_size import MessageTooLargeError
from core.ids import clipped, shown
from core.stored_text import NumberBeyondDouble, json_double, json_whole

if TYPE_CHECKING:  # pragma: no cover
    from core.agent import Agent, AgentResult, TurnOutcome
    from core.gateway.app import Gateway

log = logging.getLogger(__name__)


async def read_json(request: Request) -> Any:
    try:
        raw = await request.body()
    except ClientDisconnect:  # nobody to answer; a client's going away is not the gateway failing
        raise GatewayError(400, "The client disconnected before the whole request body arrived.",
                           code="client_disconnected") from None
    try:
        # As UTF-8 text (RFC 8259), never by json's guess from the bytes: a UTF-16 body read as such hides its
        # brackets from the guard's nesting count, which reads the bytes as UTF-8 does.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise bad_request(f"The request body is not UTF-8 (a byte at position {exc.start} is not); send JSON encoded "
                          "as UTF-8.") from None
    try:
        # Numbers as import reads them (``stored_text.json_double`` / ``json_whole``): one beyond a double's range
        # would be stored as null (``1e400``) or whole (an integer of 4,000 digits), which Mastra reads as
        # Infinity; NaN and Infinity are not JSON.
        return json.loads(text, parse_constant=_not_json, parse_float=json_double, parse_int=json_whole,
                          object_pairs_hook=_one_value_a_key)
    except _KeyTwice as exc:
        raise bad_request(f"The request body names the key {shown(exc.args[0])} twice in one object, with "
                          "different values. JSON readers differ on which one counts (this server would read the "
                          "last, a proxy or log in front of it may read the first), so send each key once. Nothing "
                          "was read or written.", param=clipped(exc.args[0]), code="duplicate_key") from None
    except NumberBeyondDouble as exc:
        raise bad_request(f"The request body holds the number {exc.number}, beyond what a double holds (Mastra and "
                          "any JavaScript reader read it as Infinity). Send a smaller number, or the digits as a "
                          "string. Nothing was read or written.", code="number_out_of_range") from None
    except _NotJson as exc:
        raise bad_request(f"The request body holds {exc.args[0]}, which is not a JSON number; send null, a number "
                          "or a string instead. Nothing was read or written.") from None
    except ValueError as exc:
        raise bad_request(f"The request body is not valid JSON ({exc}).") from None
    except RecursionError:  # the guard refuses deep nesting first; this is for an app without it
        raise bad_request("The JSON body is nested too deeply; send a flatter document.",
                          code="json_too_deep") from None


class _NotJson(MemoryStudioError, ValueError):
    """A constant Python's parser takes and JSON has not (``NaN``, ``Infinity``, ``-Infinity``)."""


def _not_json(constant: str) -> Any:
    raise _NotJson(constant)


class _KeyTwice(MemoryStudioError, ValueError):
    """A key an object of the body holds twice with two values (the same value twice is one value)."""


def _one_value_a_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the body, refused when it holds a key twice with different values: Python's reader keeps the
    last, others (a proxy that checked ``metadata.resource_id``, an access log) the first, so the gateway would act
    on another value than they saw, as with a query parameter sent twice (``memory_routes``)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        for key, value in pairs:
            if not _same(obj[key], value):
                raise _KeyTwice(key)
    return obj


def _same(a: Any, b: Any) -> bool:
    """Whether two values of the body are one value: equal and of the same types all the way down (Python's ``==``
    takes ``[true]`` for ``[1]`` and ``1`` for ``1.0``, which a reader in front of the gateway tells apart). Depth is
    the body's, which the guard caps (``JsonDepth``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


#: The chat route as idempotency keys are scoped to it.
CHAT_ROUTE = "POST /v1/chat/completions"
#: Headers that choose where a turn is stored: part of what makes two requests with one key the same.
_TURN_HEADERS = ("x-thread-id", "x-resource-id", "x-conversation-id")


async def chat_completions(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    key = key_of(request.headers)
    body = await read_json(request)
    if not isinstance(body, Mapping):
        raise bad_request("The request body must be a JSON object.")
    agent = gateway.registry.get(body.get("model"))
    turn = parse_turn(body, request.headers, model=str(body["model"]), has_memory=agent.memory is not None,
                      default_resource=gateway.default_resource, caller=caller_of(request.scope))
    claim: Claim | None = None
    if key is not None:
        got = await _claim_turn(request, gateway, agent, turn, body, key)
        if isinstance(got, Replay):
            return replay_completion(got.outcome, turn)
        claim = got
        if claim is not None and claim.thread_id and claim.thread_id != turn.thread_id:
            # A key taken over from a request whose process died: its turn's thread, which it chose.
            turn = replace(turn, thread_id=claim.thread_id)
    if turn.stream:
        return TurnStream(gateway, agent, turn, claim=claim)
    completion_id, created = _completion_id(), int(time.time())
    stop = CallStop()
    try:
        async with until_client_leaves(request.receive, stop, gateway, claim):
            if claim is None:
                result, agent_ms, turn = await anyio.to_thread.run_sync(_timed_turn, agent, turn, None, stop,
                                                                        limiter=gateway.limiter)
            else:
                async with holding(gateway.keeper, claim, gateway.memory_limiter):
                    result, agent_ms, turn = await anyio.to_thread.run_sync(
                        _kept_turn, gateway.keeper, claim, agent, turn, completion_id, created, stop,
                        limiter=gateway.limiter)
    except Exception:
        if not stop.stopped:
            raise
        kept = await anyio.to_thread.run_sync(_message_stored, agent, turn, limiter=gateway.memory_limiter)
        client_left(turn, stop, stored=False, kept=kept)
        return Response(status_code=CLIENT_CLOSED)
    if stop.stopped:
        client_left(turn, stop, stored=True)
    done = finished(result)
    payload = _completion(completion_id, created, turn, done)
    # Server-Timing: how long the agent itself took, so what the gateway adds can be told apart.
    return JSONResponse(payload, headers={**memory_headers(turn, done), "server-timing": f"agent;dur={agent_ms:.3f}"},
                        background=sweep_task(gateway, claim))


def _completion(completion_id: str, created: int, turn: Turn, done: TurnFinished) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": completion_id, "object": "chat.completion", "created": created, "model": turn.agent,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": done.text},
                     "finish_reason": done.finish_reason, "logprobs": None}],
        "memory": _memory_info(turn, done),
    }
    if done.usage is not None:
        payload["usage"] = done.usage.to_dict()
    return payload


def _timed_turn(agent: Agent, turn: Turn, kept: KeptTurn | None = None,
                stop: CallStop | None = None) -> tuple[AgentResult, float, Turn]:
    start = time.perf_counter()
    turn = resolve_thread(agent, turn)
    if kept is not None:
        kept.turn = turn  # the thread its answer names
    try:
        result = run_turn(agent, turn, kept, stop)
    except MessageTooLargeError as exc:
        raise reply_too_large(exc, turn, agent) from exc
    return result, (time.perf_counter() - start) * 1000, turn


# -- idempotency keys (core.gateway.idempotency) -------------------------------------------------------


async def _claim_turn(request: Request, gateway: Gateway, agent: Agent, turn: Turn, body: Mapping[str, Any],
                      key: str) -> Claim | Replay | None:
    """Take the request's key in its memory's database, or its first request's kept outcome. None: the agent
    has no memory, so the turn stores nothing and there is nothing to keep (the key is not used)."""
    if agent.memory is None:
        return None
    # ``stream`` and ``stream_options`` only say how to answer: a repeat may ask otherwise and still get the turn.
    digest = request_hash(route=CHAT_ROUTE, body={k: v for k, v in body.items() if k not in ("stream", "stream_options")},
                          headers={h: request.headers.get(h) for h in _TURN_HEADERS})
    scope = scope_of(caller_of(request.scope), turn.resource_id, CHAT_ROUTE)

    def claim() -> Claim | Replay | None:
        memory = resolve_memory(agent.memory, turn.request_context())
        if memory is None:
            return None
        return gateway.keeper.claim(memory.store.db, scope=scope, key=key, digest=digest,
                                    resource_id=turn.resource_id, thread_id=turn.thread_id)

    return await anyio.to_thread.run_sync(claim, limiter=gateway.memory_limiter)


def _kept_turn(keeper: Keeper, claim: Claim, agent: Agent, turn: Turn, completion_id: str,
               created: int, stop: CallStop | None = None) -> tuple[AgentResult, float, Turn]:
    """``_timed_turn`` under the key (``Keeper.run``): its outcome is saved with the turn (``KeptTurn``)."""
    kept = KeptTurn(keeper, claim, completion_id, created, turn)
    return keeper.run(claim, lambda: _timed_turn(agent, turn, kept, stop),
                      lambda got: kept.left_to_keep(got[2], finished(got[0])))


class KeptTurn:
    """A chat turn's ``save_with``: its answer kept for its key in the transaction that saves it, so a process
    that dies after the save has kept the answer too (a retry is answered from it, never run again)."""

    def __init__(self, keeper: Keeper, claim: Claim, completion_id: str, created: int, turn: Turn) -> None:
        self.keeper, self.claim, self.completion_id, self.created, self.turn = keeper, claim, completion_id, created, turn
        self.write: SavedOutcome | None = None

    def __call__(self, outcome: TurnOutcome) -> SavedOutcome:
        self.write = self.keeper.saved_with(
            self.claim, completion_outcome(self.completion_id, self.created, self.turn, finished(outcome)),
            thread_id=self.turn.thread_id)
        return self.write

    def left_to_keep(self, turn: Turn, done: TurnFinished) -> dict[str, Any] | None:
        """The outcome still to keep once the turn returned: None when it was saved with the turn (else the
        memory saved nothing, as a read-only one, and it is kept on its own)."""
        if self.write is not None and self.write.committed:
            return None
        return completion_outcome(self.completion_id, self.created, turn, done)


def completion_outcome(completion_id: str, created: int, turn: Turn, done: TurnFinished) -> dict[str, Any]:
    """A stored turn's answer as kept for its key: enough to answer a repeat as JSON or as a stream."""
    return {"kind": "completion", "id": completion_id, "created": created, "model": turn.agent,
            "text": done.text, "finish_reason": done.finish_reason,
            "usage": done.usage.to_dict() if done.usage is not None else None,
            "memory": _memory_info(turn, done), "headers": memory_headers(turn, done)}


def keep_outcome(keeper: Keeper, claim: Claim, outcome: Mapping[str, Any], turn: Turn) -> None:
    try:
        keeper.complete(claim, outcome, thread_id=turn.thread_id)
    except Exception:  # noqa: BLE001 - the turn is stored and answered; a repeat after the lease runs it again
        log.error("a turn was stored but its outcome could not be kept for its idempotency key", exc_info=True)


def replay_completion(outcome: Mapping[str, Any], turn: Turn) -> Response:
    """A kept outcome answering a repeat: as JSON, or as a stream when the repeat asks for one."""
    headers = {**outcome.get("headers", {}), REPLAYED_HEADER: "true"}
    if outcome["kind"] != "completion":
        return replay_json(outcome)
    payload: dict[str, Any] = {
        "id": outcome["id"], "object": "chat.completion", "created": outcome["created"], "model": outcome["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": outcome["text"]},
                     "finish_reason": outcome["finish_reason"], "logprobs": None}],
        "memory": outcome["memory"],
    }
    if outcome.get("usage") is not None:
        payload["usage"] = outcome["usage"]
    if not turn.stream:
        return JSONResponse(payload, headers=headers)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"id": outcome["id"], "object": "chat.completion.chunk", "created": outcome["created"],
                "model": outcome["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}

    events = [chunk({"role": "assistant", "content": ""})]
    if outcome["text"]:
        events.append(chunk({"content": outcome["text"]}))
    last = chunk({}, outcome["finish_reason"])
    last["memory"] = outcome["memory"]
    events.append(last)
    if turn.include_usage:
        usage = chunk({})
        usage["choices"] = []
        usage["usage"] = outcome.get("usage")
        events.append(usage)

    async def lines() -> AsyncIterator[bytes]:
        for event in events:
            yield ("data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode("utf-8")
        yield b"data: [DONE]\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream; charset=utf-8",
                             headers={**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})


def replay_json(outcome: Mapping[str, Any]) -> Response:
    """A kept JSON outcome (a memory API write's answer, a kept 4xx), with the header saying it is a replay."""
    return JSONResponse(outcome["body"], status_code=int(outcome["status"]),
                        headers={**outcome.get("headers", {}), REPLAYED_HEADER: "true"})


@asynccontextmanager
async def holding(keeper: Keeper, claim: Claim, limiter: anyio.CapacityLimiter) -> AsyncIterator[None]:
    """Renew ``claim``'s lease every third of it while the block runs (a request slower than the lease keeps
    its key; one whose process dies stops renewing, and its key is free once the lease runs out)."""

    async def renew() -> None:
        while True:
            await anyio.sleep(keeper.settings.lease / 3)
            try:
                if not await anyio.to_thread.run_sync(keeper.renew, claim, limiter=limiter):
                    return  # settled (or taken over): nothing more to hold
            except Exception:  # noqa: BLE001 - the next renewal tries again
                log.warning("renewing an idempotency key's lease failed", exc_info=True)

    async with beside(renew):
        yield


@asynccontextmanager
async def beside(task: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run ``task`` while the block runs; it is cancelled when the block ends, and an error of the block is raised
    as itself (not inside an exception group)."""
    failed: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(task)
        try:
            yield
        except Exception as exc:
            failed = exc
        finally:
            group.cancel_scope.cancel()
    if failed is not None:
        raise failed


#: The status of the answer to a client that left before it (nginx's "client closed request"): nobody reads it, and
#: uvicorn sends and logs nothing for a client gone; an ASGI middleware in front sees this status.
CLIENT_CLOSED = 499


@asynccontextmanager
async def until_client_leaves(receive: Receive, stop: CallStop, gateway: Gateway, claim: Claim | None, *,
                              then: anyio.CancelScope | None = None) -> AsyncIterator[anyio.CancelScope]:
    """While the block runs (a turn, its request body read whole): when the client closes its connection, ``stop``
    the turn (its model call's connection is shut down, nothing of it is saved), give its idempotency key back at
    once, so the client's retry runs the turn rather than meet 409 while this one winds down (the turn, no longer
    the key's holder, cannot save: ``SavedOutcome`` refuses), then cancel ``then``. The block gets the watcher's
    scope: a block that answers inside it cancels that first, since the server's ``receive`` says
    ``http.disconnect`` once the answer is complete too."""
    watching = anyio.CancelScope()

    async def watch() -> None:
        with watching:
            while (await receive())["type"] != "http.disconnect":
                pass
            await client_gone(stop, "the client closed its connection", gateway, claim)
            if then is not None:
                then.cancel()

    async with beside(watch):
        yield watching


async def client_gone(stop: CallStop, reason: str, gateway: Gateway, claim: Claim | None) -> None:
    """Stop a turn whose client left (``reason``) and give its key back (see ``until_client_leaves``)."""
    if not stop.stop(reason) or claim is None:
        return
    await anyio.to_thread.run_sync(gateway.keeper.release, claim, limiter=gateway.memory_limiter)


def _message_stored(agent: Agent, turn: Turn) -> bool:
    """Whether the failed turn's own message is stored (``reply_too_large``); a read that fails says no."""
    try:
        memory = resolve_memory(agent.memory, turn.request_context()) if agent.memory is not None else None
        return memory is not None and bool(memory.store.memory.get_messages([turn.message.id]))
    except Exception:  # noqa: BLE001 - the turn's own error is the one to report
        log.warning("reading whether message %s was stored failed", turn.message.id, exc_info=True)
        return False


def client_left(turn: Turn, stop: CallStop, *, stored: bool, kept: bool = False) -> None:
    """The log line of a turn whose client left before its answer (the trace's spans say it too). ``kept``: the
    turn was not stored, but its message was (synchronous observational memory stores the message it observes,
    with that observation, before the model is asked; ``_message_stored``)."""
    where = f"agent {turn.agent!r}, thread {turn.thread_id!r}, resource {turn.resource_id!r}"
    if stored:
        log.info("a client left once its turn was stored (%s; %s): a retry with its Idempotency-Key gets the answer, "
                 "one without stores the turn again", stop.reason, where)
    elif kept:
        log.warning("a client left before its turn's answer (%s; %s): its model call was stopped and nothing of the "
                    "reply was saved; its message %s was stored, with the observation observational memory made of "
                    "it before the model was asked (sent again to this thread, it is not stored or observed twice)",
                    stop.reason, where, turn.message.id)
    else:
        log.warning("a client left before its turn's answer (%s; %s): its model call was stopped and nothing of the "
                    "turn was saved", stop.reason, where)


def sweep_task(gateway: Gateway, claim: Claim | None) -> BackgroundTask | None:
    """After a response that used a key: delete the database's expired keys, when this process is due to."""
    if claim is None or not gateway.keeper.sweep_due(claim.db):
        return None
    db = claim.db

    async def sweep() -> None:
        await anyio.to_thread.run_sync(gateway.keeper.sweep, db, limiter=gateway.memory_limiter)

    return BackgroundTask(sweep)


def reply_too_large(exc: MessageTooLargeError, turn: Turn, agent: Agent) -> Exception:
    """The error a client gets for a turn refused by the message size limit.

    The client's own message over the limit is its mistake (413, as ``classify`` says). Any other message
    of the turn is the agent's reply (its text, tool calls and results): the request was small, so "shorten
    it" would mislead. That is the agent's failure (502, like a model's), and the reply was not saved; the
    client's message neither, unless synchronous observational memory stored it with its observation before
    the model was asked (then it says so: sent again, it is not stored twice).
    """
    if exc.message_id == turn.message.id:
        return exc
    yours = ("your message was, with the observation observational memory made of it before the model was asked "
             "(sent again to this thread, it is not stored or observed twice)" if _message_stored(agent, turn)
             else "your message neither")
    return GatewayError(
        502, f"The agent's reply is {exc.size:,} bytes as stored (its text, tool calls and tool results), over "
        f"this memory's limit of {exc.limit:,} bytes per message, so the reply was not saved; {yours}. Ask for a "
        "shorter answer; the gateway's operator can cap replies (the agent's model setting "
        "max_tokens, or --max-tokens) or raise MemoryOptions(max_message_bytes=...).",
        # Not sent again by the client's SDK on its own: the same prompt tends to the same reply, and the
        # turn's tools, which ran, would run again.
        type="api_error", code="reply_too_large", retry=False)


async def list_models(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    return JSONResponse({"object": "list", "data": [_model(name, gateway.started) for name in gateway.registry.names]})


async def get_model(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    name = request.path_params["model"]
    gateway.registry.get(name)
    return JSONResponse(_model(name, gateway.started))


def _model(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "memory-studio"}


def memory_headers(turn: Turn, done: TurnFinished | None = None) -> dict[str, str]:
    """Where the turn was remembered, so a client can continue the thread it did not name; the fields it did not
    use; the codes of its notices (those of ``done`` once it has run: a streamed reply's headers go before)."""
    headers = {}
    # HTTP headers carry Latin-1 only; a non-ASCII id is still in the body's "memory" object.
    if turn.thread_id and _header_value(turn.thread_id):
        headers["x-thread-id"] = turn.thread_id
    if turn.resource_id and _header_value(turn.resource_id):
        headers["x-resource-id"] = turn.resource_id
    ignored = _ignored_header([name for name in turn.ignored if _header_value(name) and "," not in name])
    if ignored:  # (names a header cannot carry are in the body's "memory" object only)
        headers[IGNORED_HEADER] = ignored
    headers.update(notices_header([*turn.notices, *(done.notices if done is not None else ())]))
    return headers


def _ignored_header(names: list[str]) -> str:
    """``x-memory-ignored``: the names, joined, within ``IGNORED_HEADER_CHARS`` (then "... and N more"). All of them
    (up to 64 of some 80 to 130 characters) made a header of up to 8 KB, past the 4 KB nginx reads a reply's headers
    into by default (``proxy_buffer_size``, one memory page), where it answers 502 "upstream sent too big header": to
    a turn that had run and been stored. The body's list is whole."""
    shown = ""
    for i, name in enumerate(names):
        longer = f"{shown}, {name}" if shown else name
        if len(longer) > IGNORED_HEADER_CHARS - len(", ... and 99 more"):  # (a name has at most ~130 characters)
            return ", ".join(filter(None, [shown, f"... and {len(names) - i} more"]))
        shown = longer
    return shown


def _header_value(value: str) -> bool:
    """Whether ``value`` can be sent as a header value as it is: printable ASCII without leading or
    trailing blanks (HTTP strips those, and the server refuses to send them, dropping the connection
    after the turn was saved). An id that cannot is still in the body's "memory" object."""
    return value.isascii() and value.isprintable() and value == value.strip()


def _memory_info(turn: Turn, done: TurnFinished) -> dict[str, Any]:
    return {"thread_id": turn.thread_id, "resource_id": turn.resource_id, "trace_id": done.trace_id,
            "ignored": list(turn.ignored), "notices": [*turn.notices, *done.notices]}


#: The response header naming the request's fields the turn did not use (``turns.ignored_fields``).
IGNORED_HEADER = "x-memory-ignored"
#: The longest ``x-memory-ignored`` (``_ignored_header``): with the other headers, well within the 4 KB a proxy
#: reads them into by default.
IGNORED_HEADER_CHARS = 1024


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


# -- streaming --------------------------------------------------------------------------------------


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class TurnStream(Response):
    """Runs one turn on a worker thread and relays its events as server-sent events."""

    media_type = "text/event-stream"

    def __init__(self, gateway: Gateway, agent: Agent, turn: Turn, *, claim: Claim | None = None) -> None:
        super().__init__(status_code=200)
        self.gateway, self.agent, self.turn = gateway, agent, turn
        self.completion_id = _completion_id()
        self.created = int(time.time())
        # The request's idempotency key: its outcome is kept once the turn is stored, before the client sees the
        # end, so a client that leaves after that point gets the stored answer when it retries.
        self.claim = claim
        self.stop = CallStop()  # stopped when the client leaves (``until_client_leaves``) or reads nothing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.claim is None:
            await self._respond(scope, receive, send)
            return
        async with holding(self.gateway.keeper, self.claim, self.gateway.memory_limiter):
            await self._respond(scope, receive, send)
        sweep = sweep_task(self.gateway, self.claim)
        if sweep is not None:  # the reply is complete: the client waits for none of this
            await sweep()

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A small buffer: the producer is rarely more than a few deltas ahead of a live client, and
        # one that stops reading holds at most this much (plus the socket's buffers) in memory.
        sender, events = anyio.create_memory_object_stream[Any](max_buffer_size=64)
        send = _with_deadline(send, self.gateway.stream_write_timeout)
        # The client is watched from the start: one that leaves before the first event (a model still reading a long
        # prompt) stops the turn too. Leaving cancels the relay; the producer then finishes, its turn stopped.
        with anyio.CancelScope() as relay:
            async with until_client_leaves(receive, self.stop, self.gateway, self.claim, then=relay) as watching, \
                    anyio.create_task_group() as group:
                group.start_soon(self._produce, sender)
                async with events:
                    first = await _next(events)
                    if isinstance(first, _Failed):
                        reply = classify(first.exc)
                        watching.cancel()  # (the turn has ended)
                        await JSONResponse(reply.body, status_code=reply.status, headers=reply.headers or None)(
                            scope, receive, send)
                        return
                    try:
                        await send({"type": "http.response.start", "status": 200, "headers": self._sse_headers()})
                        await self._relay(first, events, send, watching)
                    except TimeoutError:
                        # Closing the channel (leaving this block) makes the producer's next send fail, so the
                        # turn is abandoned and its worker released; the connection is then closed.
                        seconds = self.gateway.stream_write_timeout
                        await client_gone(self.stop, f"the client read nothing of the reply for {seconds:g}s",
                                          self.gateway, self.claim)

    async def _relay(self, event: Any, events: MemoryObjectReceiveStream[Any], send: Send,
                     watching: anyio.CancelScope) -> None:
        await self._sse(send, self._chunk({"role": "assistant", "content": ""}))
        while event is not None:
            if isinstance(event, TextDelta):
                await self._sse(send, self._chunk({"content": event.text}))
            elif isinstance(event, TurnFinished):
                last = self._chunk({}, event.finish_reason)
                last["memory"] = _memory_info(self.turn, event)
                await self._sse(send, last)
                if self.turn.include_usage:
                    usage = self._chunk({})
                    usage["choices"] = []
                    usage["usage"] = event.usage.to_dict() if event.usage is not None else None
                    await self._sse(send, usage)
            elif isinstance(event, _Failed):
                await self._sse(send, classify(event.exc).body)
                break
            event = await _next(events)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
        watching.cancel()  # the answer is complete: the disconnect the server reports next is not the client leaving
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _produce(self, sender: MemoryObjectSendStream[Any]) -> None:
        async with sender:
            await anyio.to_thread.run_sync(self._pump, sender, limiter=self.gateway.limiter)

    def _pump(self, sender: MemoryObjectSendStream[Any]) -> None:
        """On the worker thread: iterate the whole turn here, so it keeps one thread and context."""
        events: Generator[TurnEvent, None, None] | None = None
        claim, settled = self.claim, self.claim is None
        keeper = self.gateway.keeper
        stored = False
        try:
            # Before the first event is sent, so the reply's headers name the thread actually used.
            self.turn = resolve_thread(self.agent, self.turn)
            kept = KeptTurn(keeper, claim, self.completion_id, self.created, self.turn) if claim is not None else None
            events = turn_events(self.agent, self.turn, kept, self.stop)
            for event in events:
                if isinstance(event, TurnFinished):
                    stored = True  # (``Agent.stream`` saves before ``finish``)
                    if claim is not None and kept is not None:
                        # The turn is stored with its answer; else (a memory that saved nothing) keep it now.
                        left = kept.left_to_keep(self.turn, event)
                        if left is not None:
                            keep_outcome(keeper, claim, left, self.turn)
                        settled = True
                anyio.from_thread.run(sender.send, event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # The relay was left: its client went away (or read nothing); closing the events below abandons the turn.
            self.stop.stop("the reply could not be sent")
            client_left(self.turn, self.stop, stored=stored,
                        kept=not stored and _message_stored(self.agent, self.turn))
        except Exception as exc:  # noqa: BLE001 - reported to the client as an error response/event
            if self.stop.stopped:  # its client left: nobody to report to; nothing was saved but, maybe, its message
                client_left(self.turn, self.stop, stored=False, kept=_message_stored(self.agent, self.turn))
                return
            if isinstance(exc, MessageTooLargeError):
                exc = reply_too_large(exc, self.turn, self.agent)
            if claim is not None and not settled:
                self.gateway.keeper.fail(claim, exc)
                settled = True
            try:
                anyio.from_thread.run(sender.send, _Failed(exc))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.info("client left before a failed streamed reply could be reported: %s", exc)
        finally:
            if events is not None:
                events.close()
            if claim is not None and not settled:  # stopped before the turn was stored: a retry runs again
                self.gateway.keeper.release(claim)

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.turn.agent,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}

    @staticmethod
    async def _sse(send: Send, data: dict[str, Any]) -> None:
        line = "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n"
        await send({"type": "http.response.body", "body": line.encode("utf-8"), "more_body": True})

    def _sse_headers(self) -> list[tuple[bytes, bytes]]:
        headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache",
                   "x-accel-buffering": "no", **memory_headers(self.turn)}
        return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def _with_deadline(send: Send, seconds: float) -> Send:
    """``send`` that raises ``TimeoutError`` when the client takes more than ``seconds`` to take a write."""

    async def timed(message: MutableMapping[str, Any]) -> None:
        with anyio.fail_after(seconds):
            await send(message)

    return timed


async def _next(events: MemoryObjectReceiveStream[Any]) -> TurnEvent | _Failed | None:
    try:
        return await events.receive()  # type: ignore[no-any-return]
    except anyio.EndOfStream:
        return None


def routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]


__all__ = ["GatewayError", "TurnStream", "chat_completions", "list_models", "memory_headers", "routes"]
