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
from collections.abc import Generator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from core.gateway.access import caller_of
from core.gateway.errors import GatewayError, bad_request, classify
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
from core.message_size import MessageTooLargeError

if TYPE_CHECKING:  # pragma: no cover
    from core.agent import Agent, AgentResult
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
        return json.loads(text)
    except ValueError as exc:
        raise bad_request(f"The request body is not valid JSON ({exc}).") from None
    except RecursionError:  # the guard refuses deep nesting first; this is for an app without it
        raise bad_request("The JSON body is nested too deeply; send a flatter document.",
                          code="json_too_deep") from None


async def chat_completions(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    body = await read_json(request)
    if not isinstance(body, Mapping):
        raise bad_request("The request body must be a JSON object.")
    agent = gateway.registry.get(body.get("model"))
    turn = parse_turn(body, request.headers, model=str(body["model"]), has_memory=agent.memory is not None,
                      default_resource=gateway.default_resource, caller=caller_of(request.scope))
    if turn.stream:
        return TurnStream(gateway, agent, turn)
    result, agent_ms, turn = await anyio.to_thread.run_sync(_timed_turn, agent, turn, limiter=gateway.limiter)
    done = finished(result)
    completion_id = _completion_id()
    payload: dict[str, Any] = {
        "id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": turn.agent,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": done.text},
                     "finish_reason": done.finish_reason, "logprobs": None}],
        "memory": _memory_info(turn, done),
    }
    if done.usage is not None:
        payload["usage"] = done.usage.to_dict()
    # Server-Timing: how long the agent itself took, so what the gateway adds can be told apart.
    return JSONResponse(payload, headers={**memory_headers(turn), "server-timing": f"agent;dur={agent_ms:.3f}"})


def _timed_turn(agent: Agent, turn: Turn) -> tuple[AgentResult, float, Turn]:
    start = time.perf_counter()
    turn = resolve_thread(agent, turn)
    try:
        result = run_turn(agent, turn)
    except MessageTooLargeError as exc:
        raise reply_too_large(exc, turn) from exc
    return result, (time.perf_counter() - start) * 1000, turn


def reply_too_large(exc: MessageTooLargeError, turn: Turn) -> Exception:
    """The error a client gets for a turn refused by the message size limit.

    The client's own message over the limit is its mistake (413, as ``classify`` says). Any other message
    of the turn is the agent's reply (its text, tool calls and results): the request was small, so "shorten
    it" would mislead. That is the agent's failure (502, like a model's), and the turn was not saved.
    """
    if exc.message_id == turn.message.id:
        return exc
    return GatewayError(
        502, f"The agent's reply is {exc.size:,} bytes as stored (its text, tool calls and tool results), over "
        f"this memory's limit of {exc.limit:,} bytes per message, so the turn was not saved, your message "
        "neither. Ask for a shorter answer; the gateway's operator can cap replies (the agent's model setting "
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


def memory_headers(turn: Turn) -> dict[str, str]:
    """Where the turn was remembered, so a client can continue the thread it did not name."""
    headers = {}
    # HTTP headers carry Latin-1 only; a non-ASCII id is still in the body's "memory" object.
    if turn.thread_id and _header_value(turn.thread_id):
        headers["x-thread-id"] = turn.thread_id
    if turn.resource_id and _header_value(turn.resource_id):
        headers["x-resource-id"] = turn.resource_id
    return headers


def _header_value(value: str) -> bool:
    """Whether ``value`` can be sent as a header value as it is: printable ASCII without leading or
    trailing blanks (HTTP strips those, and the server refuses to send them, dropping the connection
    after the turn was saved). An id that cannot is still in the body's "memory" object."""
    return value.isascii() and value.isprintable() and value == value.strip()


def _memory_info(turn: Turn, done: TurnFinished) -> dict[str, Any]:
    return {"thread_id": turn.thread_id, "resource_id": turn.resource_id, "trace_id": done.trace_id}


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


# -- streaming --------------------------------------------------------------------------------------


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class TurnStream(Response):
    """Runs one turn on a worker thread and relays its events as server-sent events."""

    media_type = "text/event-stream"

    def __init__(self, gateway: Gateway, agent: Agent, turn: Turn) -> None:
        super().__init__(status_code=200)
        self.gateway, self.agent, self.turn = gateway, agent, turn
        self.completion_id = _completion_id()
        self.created = int(time.time())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A small buffer: the producer is rarely more than a few deltas ahead of a live client, and
        # one that stops reading holds at most this much (plus the socket's buffers) in memory.
        sender, events = anyio.create_memory_object_stream[Any](max_buffer_size=64)
        send = _with_deadline(send, self.gateway.stream_write_timeout)
        async with anyio.create_task_group() as group:
            group.start_soon(self._produce, sender)
            async with events:
                first = await _next(events)
                if isinstance(first, _Failed):
                    reply = classify(first.exc)
                    await JSONResponse(reply.body, status_code=reply.status, headers=reply.headers or None)(
                        scope, receive, send)
                    return
                try:
                    await send({"type": "http.response.start", "status": 200, "headers": self._sse_headers()})
                    group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
                    await self._relay(first, events, send)
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except TimeoutError:
                    # Closing the channel (leaving this block) makes the producer's next send fail, so
                    # the turn is abandoned and its worker released; the connection is then closed.
                    log.warning("a client read nothing of a streamed reply for %gs; it was dropped and its turn "
                                "abandoned", self.gateway.stream_write_timeout)
            group.cancel_scope.cancel()  # stops the disconnect watcher; the producer has finished

    async def _relay(self, event: Any, events: MemoryObjectReceiveStream[Any], send: Send) -> None:
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

    async def _produce(self, sender: MemoryObjectSendStream[Any]) -> None:
        async with sender:
            await anyio.to_thread.run_sync(self._pump, sender, limiter=self.gateway.limiter)

    def _pump(self, sender: MemoryObjectSendStream[Any]) -> None:
        """On the worker thread: iterate the whole turn here, so it keeps one thread and context."""
        events: Generator[TurnEvent, None, None] | None = None
        try:
            # Before the first event is sent, so the reply's headers name the thread actually used.
            self.turn = resolve_thread(self.agent, self.turn)
            events = turn_events(self.agent, self.turn)
            for event in events:
                anyio.from_thread.run(sender.send, event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.info("client left during a streamed reply; the turn was stopped at that point")
        except Exception as exc:  # noqa: BLE001 - reported to the client as an error response/event
            if isinstance(exc, MessageTooLargeError):
                exc = reply_too_large(exc, self.turn)
            try:
                anyio.from_thread.run(sender.send, _Failed(exc))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.info("client left before a failed streamed reply could be reported: %s", exc)
        finally:
            if events is not None:
                events.close()

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


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


def routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]


__all__ = ["GatewayError", "TurnStream", "chat_completions", "list_models", "memory_headers", "routes"]
