"""What each model call of an Agents SDK run sent, kept as the turn's record (Replay shows it exactly).

The SDK builds its own prompts, so our processors cannot rebuild them: the record keeps what was
sent instead (``core.replay.record``, version 3; ``core.replay.verbatim`` shows it). It is taken at
the wire: an ``httpx`` request hook on the model's OpenAI client (``watch``) reads the whole body of
each ``/chat/completions`` or ``/responses`` request (messages, tool definitions, tool choice, every
setting, ``extra_body`` merged in), which nothing else holds: the SDK's generation span carries the
messages, the model and the SDK's own settings object, not the tool definitions nor keys such as
``response_format``, ``parallel_tool_calls`` or ``store``. A model call whose body the hook did not
see (a model that is no OpenAI client, or a hook that could not be added) is taken from its
generation span when the span holds its messages (``partial``: its tools and settings are then
unknown, and Replay says so); with neither, the turn writes no record and stays a reconstruction.

Which call a body belongs to: the session's memory filter runs right before each model call, in the
task that makes it, and arms a ``PendingCall`` in a context variable (``ARMED``); the hook and the
generation span's end, in that same task, fill it, with a request of the client of the call's model
that sends the instructions the filter gave (tasks started meanwhile, a hook's, a tool's or a
guardrail's own run, inherit the armed call). A run is its trace and its run context (``RUN``); a run
resumed after a tool approval continues the turn it answers. The record is written with the turn's messages
(a staged write of ``Memory.save_messages``), again at each save of the run: the last one, after the
last model call, holds every call and every reply.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from agents.tracing import get_current_trace

from core.llm.http import safe_url
from core.llm.request_hook import RequestWatch, http_client
from core.llm.wire import OPENAI_PYTHON_WIRE, wire_bytes
from core.processors.base import SavedAwareWrite
from core.replay import store as records
from core.replay import tools as tool_defs
from core.replay.record import CallRecord, TurnRecord, bytes_hash, request_hash

if TYPE_CHECKING:  # pragma: no cover
    from core.memory import Memory
    from core.messages import Message

log = logging.getLogger(__name__)

FRAMEWORK = "openai-agents"
#: A body's keys that are its conversation (kept verbatim in the record); the rest are settings.
_CONVERSATION = ("messages", "instructions", "input")
_TRANSPORT = ("stream", "stream_options")
_PATHS = ("/chat/completions", "/responses")


@dataclass
class PendingCall:
    """One model call of a run: the body the server received (``body``, from the wire hook), else what
    its generation span knew (``messages``, ``model``); the usage the span reported."""

    body: dict[str, Any] | None = None
    #: The ``httpx`` client the call's request goes through (``http_of`` its model): only a request of
    #: that client is this call's (a model that is no OpenAI client: ``None``, no request is). ``ANY``
    #: while the model is not known (a model name the run's provider has not resolved yet).
    client: Any = None
    by_provider: bool = False  # the model is the one the run's provider resolves (``resolved``)
    #: The instructions the input filter gave the call (None: none, or not known): a request that sends
    #: others is another agent's (a run started from a hook while this call was armed).
    instructions: str | None = None
    transport: dict[str, Any] = field(default_factory=dict)
    endpoint: str | None = None
    messages: list[dict[str, Any]] | None = None
    model: str | None = None
    usage: dict[str, int] | None = None
    raw: bytes | None = None  # the body's bytes as sent (``body`` is them parsed)

    @property
    def known(self) -> bool:
        return self.body is not None or self.messages is not None

    def takes(self, http: Any) -> bool:
        """A request of ``http`` is this call's while it has no body yet and goes through its model's
        client (a request of another client, e.g. a guardrail's or a tool's own run while a call whose
        model has no hook is armed, is not this call's)."""
        return self.body is None and (self.client is ANY or self.client is http)

    def sent(self, request: Any, raw: bytes, path: str) -> None:
        """The whole body of this call's request (the wire hook, ``_WATCH``)."""
        body = json.loads(raw)
        if not isinstance(body, dict):
            return
        if self.instructions is not None and _instructions(body) != self.instructions:
            return  # another agent's request on this client (a run a hook started): not this call's
        base = str(request.url).split("?", 1)[0]
        self.endpoint = safe_url(base[: len(base) - len(path)])
        self.transport = {k: body.pop(k) for k in _TRANSPORT if k in body}
        self.raw = raw
        self.body = body

    def unread(self) -> None:
        """Its request could not be read: the call keeps what its trace saw."""


#: The model call about to be made in this task (set by the memory filter, filled by the hook and span).
ARMED: contextvars.ContextVar[PendingCall | None] = contextvars.ContextVar("memory_studio_sdk_call", default=None)
_WATCH = RequestWatch(ARMED, _PATHS, "could not read the Agents SDK's request to %s: its turn record keeps what "
                                     "the trace saw")
#: The run going on in this task: the run context (``RunContextWrapper``) the Runner passed the session
#: (one per ``Runner.run``; set when the Runner first calls the session, before any model call). Two
#: runs inside one trace of the caller's (``with trace(...)``), one after the other or side by side,
#: are two runs, not one.
RUN: contextvars.ContextVar[Any] = contextvars.ContextVar("memory_studio_sdk_run", default=None)


#: ``PendingCall.client`` of a call whose model is not known yet.
ANY: Any = object()
#: The model the run's provider resolved last in this task (the SDK resolves a streamed call's model
#: before its input filter runs, a call's that is not streamed after).
_RESOLVED: contextvars.ContextVar[Any] = contextvars.ContextVar("memory_studio_sdk_model", default=None)


def http_of(model: Any) -> Any:
    """The ``httpx`` client of an SDK model's OpenAI client (``OpenAIChatCompletionsModel``,
    ``OpenAIResponsesModel``); None for a model that has none (LiteLLM, a wrapped client...)."""
    return http_client(getattr(model, "_client", None))  # the SDK's models keep their AsyncOpenAI here


def expect(pending: PendingCall, model: Any) -> None:
    """The call about to be made goes to ``model``: an SDK ``Model``, or None when the run's provider
    resolves it (``resolved``)."""
    if model is None:
        pending.by_provider = True
        model = _RESOLVED.get()
        if model is None:
            pending.client = ANY
            return
    pending.client = http_of(model)


def resolved(model: Any) -> None:
    """The run's provider gave ``model`` in this task: the call armed here, if its model is the
    provider's, goes to it."""
    _RESOLVED.set(model)
    pending = ARMED.get()
    if pending is not None and pending.by_provider and pending.body is None:
        pending.client = http_of(model)


def _instructions(body: Mapping[str, Any]) -> Any:
    """The instructions a request body sends: a Responses body's ``instructions``, a chat body's
    leading system message (the SDK puts them there)."""
    if "instructions" in body or "input" in body:
        return body.get("instructions")
    messages = body.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    return first.get("content") if isinstance(first, Mapping) and first.get("role") == "system" else None


def watch(model: Any) -> bool:
    """Add the request hook to the OpenAI client of an SDK model (``OpenAIChatCompletionsModel``,
    ``OpenAIResponsesModel``), once; False when the model has no such client (its calls are then taken
    from their trace). The hook reads a body only for a call a ``MemorySession`` armed."""
    return _WATCH.watch(getattr(model, "_client", None)) is not None


def from_span(pending: PendingCall, model: str | None, messages: Any, usage: dict[str, int] | None) -> None:
    """What the call's generation span knew (its end runs in the task that armed the call)."""
    if pending.instructions is not None and isinstance(messages, list) and \
            _instructions({"messages": messages}) != pending.instructions:
        return  # another agent's call (a run a hook started while this call was armed)
    pending.usage = usage if usage and any(usage.values()) else None  # a stream without usage reports zeros
    if pending.body is None and isinstance(messages, list):
        pending.messages = [dict(m) for m in messages if isinstance(m, Mapping)]
        pending.model = model


def call_record(pending: PendingCall) -> tuple[CallRecord, list[dict[str, Any]]]:
    """A pending call as the record keeps it, and its tool definitions (stored by hash when written)."""
    if pending.body is None:
        messages: dict[str, Any] = {"messages": pending.messages or []}
        return CallRecord(request_hash({"model": pending.model, **messages}), pending.model, usage=pending.usage,
                          sent=messages, partial=True), []
    body = pending.body
    sent: dict[str, Any] = {k: body[k] for k in _CONVERSATION if k in body}
    raw_tools = body.get("tools")
    tools = [dict(t) for t in raw_tools] if isinstance(raw_tools, list) and raw_tools and \
        all(isinstance(t, Mapping) for t in raw_tools) else []
    taken = {"model", *sent}
    if tools:
        taken.add("tools")
    if body.get("tool_choice") is not None:
        taken.add("tool_choice")
    settings = {k: v for k, v in body.items() if k not in taken}
    model = body.get("model")
    call = CallRecord(request_hash(body), model if isinstance(model, str) else None, settings,
                      body.get("tool_choice"), None, tuple(tools), pending.usage, None, sent)
    # The bytes are kept (by hash) only when the record makes them again exactly: the SDK's OpenAI client
    # serialises as our own model does (``OPENAI_PYTHON_WIRE``); a body it does not (a Responses call,
    # whose keys go in another order) is shown as JSON, labelled so.
    if pending.raw is not None and wire_bytes(call.sent_body(), pending.transport) == pending.raw:
        call = replace(call, wire_hash=bytes_hash(pending.raw))
    return call, tools


@dataclass
class SdkTurn:
    """One SDK run of a session: the messages its saves stored (the user's are its input) and its model
    calls."""

    trace: Any  # the run's SDK trace (a no-op one when tracing is off)
    run: Any = None  # ...and its run context (``RUN``): which run this is
    thread_id: str = ""
    resource_id: str = ""
    input_ids: list[str] = field(default_factory=list)
    response_ids: list[str] = field(default_factory=list)
    user_id: str | None = None  # its last user input message (the record's key)
    input_at: Any = None  # that message's stamp
    calls: list[PendingCall] = field(default_factory=list)
    #: When this run stores no input of its own (one resumed after a tool approval): the record of the
    #: input it answers (``MemorySession._continues``), whose turn its calls and replies continue.
    base: TurnRecord | None = None
    answered: set[str] = field(default_factory=set)  # ...and the tool calls whose outputs it stored

    def arm(self, model: Any = None, instructions: str | None = None) -> PendingCall:
        """A model call is about to be made in this task, to ``model`` (``expect``), with these
        instructions."""
        pending = PendingCall(instructions=instructions or None)
        expect(pending, model)
        self.calls.append(pending)
        ARMED.set(pending)
        return pending

    def saved(self, messages: Sequence["Message"]) -> None:
        """Messages a save of the run stored: its input (the user's: a streamed run saves it while its
        first model call runs) or what answered it."""
        for m in messages:
            if m.role == "user":
                if m.id not in self.input_ids:
                    self.input_ids.append(m.id)
                self.user_id, self.input_at = m.id, m.created_at
            elif m.id not in self.response_ids:
                self.response_ids.append(m.id)

    def record(self, memory: "Memory", thread_id: str, resource_id: str,
               calls: Sequence[CallRecord]) -> TurnRecord | None:
        """The turn's record with the calls made so far; None while it has no stored user input."""
        stored_user, input_at, input_ids, response_ids = self.user_id, self.input_at, self.input_ids, self.response_ids
        base = self.base if stored_user is None else None
        if base is not None:  # a resumed run: the turn it continues, its calls first
            stored_user, input_at, input_ids = base.input_message_id, base.created_at, list(base.input_ids)
            response_ids = [*base.response_ids, *(i for i in self.response_ids if i not in base.response_ids)]
            calls = (*base.calls, *calls)
        if stored_user is None or not calls or input_at is None:
            return None
        first = next((c for c in self.calls if c.body is not None), None)
        endpoint = first.endpoint if first is not None else None
        transport = dict(first.transport) if first is not None else None
        if base is not None and any(not c.partial for c in base.calls):
            endpoint, transport = base.endpoint, base.transport
        tools = calls[0].tools
        return TurnRecord(
            input_message_id=stored_user, thread_id=thread_id, resource_id=resource_id,
            response_ids=tuple(response_ids), created_at=input_at, options=memory.options.to_dict(),
            model=calls[0].wire_model, history_ids=(), recall=(), wm_version_id=None, om_generation=None,
            om_cursor=None, tools=tuple(str((t.get("function") or {}).get("name") or t.get("name") or "?")
                                        for t in tools),
            tokens={}, messages_hash="", input_ids=tuple(input_ids), endpoint=endpoint, calls=tuple(calls),
            transport=transport, framework=FRAMEWORK,
            wire=OPENAI_PYTHON_WIRE if any(c.wire_hash for c in calls) else "")


_RECENT = 128  # runs remembered (each holds its trace, so a trace's id is not reused while it is here)
_TURNS: list[SdkTurn] = []
_TURNS_LOCK = threading.Lock()


def turn_for(thread_id: str, resource_id: str, *, create: bool) -> SdkTurn | None:
    """The SDK run going on now on this thread (by its trace and run context; None outside a run).
    Kept per process, not per session object: the Runner's session and the run config's may be two
    objects of one thread."""
    trace = get_current_trace()
    if trace is None:
        return None
    run = RUN.get()
    with _TURNS_LOCK:
        for turn in reversed(_TURNS):
            if turn.trace is trace and turn.run is run and (turn.thread_id, turn.resource_id) == (thread_id,
                                                                                              resource_id):
                return turn
        if not create:
            return None
        turn = SdkTurn(trace, run, thread_id, resource_id)
        _TURNS.append(turn)
        del _TURNS[:-_RECENT]
        return turn


@dataclass
class TurnWrite(SavedAwareWrite):
    """A save of the run's items, staged: the run learns what was stored, and once it has made a model
    call its record is written (again) in the same transaction."""

    turn: SdkTurn
    memory: "Memory"
    thread_id: str
    resource_id: str

    def commit(self, conn: Any) -> None:
        self.commit_saved(conn, ())

    def commit_saved(self, conn: Any, saved: Sequence["Message"]) -> None:
        turn = self.turn
        turn.saved(saved)
        if not turn.calls:
            return
        if not all(c.known for c in turn.calls):
            log.info("an Agents SDK run on thread %s made a model call neither the wire hook nor its trace "
                     "recorded: its turn keeps no record (Replay reconstructs it)", self.thread_id)
            return
        store = self.memory.store
        calls: list[CallRecord] = []
        for pending in turn.calls:
            call, tools = call_record(pending)
            calls.append(replace(call, tools_key=tool_defs.write(conn, store, tools)) if tools else call)
        record = turn.record(self.memory, self.thread_id, self.resource_id, calls)
        if record is not None:
            records.rewrite(conn, store, record)


__all__ = ["ANY", "ARMED", "FRAMEWORK", "RUN", "PendingCall", "SdkTurn", "TurnWrite", "call_record", "expect",
           "from_span", "http_of", "resolved", "turn_for", "watch"]
