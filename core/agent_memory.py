"""What an agent turn asks of its memory, and the two memories a turn can have.

``Agent._run`` runs one path: it asks its ``TurnMemory`` for the turn's thread, tracer, first prompt,
later prompts, the answer's time, the memory's own tools and the save. ``MemoryTurn`` answers from a
``core.memory.Memory`` (ownership check, processors, turn record, one transaction for the turn's
writes); ``NullMemory`` is an agent without memory: no history, no working memory, no recall, nothing
saved, no memory spans, and the prompt is built from the instructions, the context and the input
alone (fitted into the model's window when it has one). ``turn_memory`` is the one place that
chooses between them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable, Mapping, Protocol, Sequence

from core.context_window import PromptBudget, fit_prompt
from core.llm.base import ChatModel, ToolCall
from core.memory import Memory
from core.message_list import MessageList, Provenance
from core.messages import Message
from core.processors.base import ProcessorContext, ThreadAsItStarted
from core.prompt import AssembledPrompt
from core.replay.capture import TurnCapture
from core.replay.capture import capture as capture_turn
from core.timeutil import to_ms
from core.traces.tracer import NOOP_TRACER, SpanTracer
from core.working_memory import TOOL_NAMES as WM_TOOL_NAMES
from core.working_memory_stage import StagedWorkingMemory

__all__ = ["MemoryTurn", "NullMemory", "TurnMemory", "TurnStart", "traced", "turn_memory"]


@dataclass(frozen=True)
class TurnStart:
    """What a turn's memory made of the request: the input as it will be stored, the first prompt,
    and the name the reply's ``metadata.agent`` carries."""

    inputs: list[Message]
    prompt: AssembledPrompt
    agent_name: str


class TurnMemory(Protocol):
    """The members ``Agent._run`` calls, in the order it calls them."""

    @property
    def memory(self) -> Memory | None:
        """What a delegation inherits when the sub-agent has no memory of its own (None: no memory)."""
        ...

    def thread_for(self, thread_id: str | None, resource_id: str | None) -> str | None:
        """The turn's thread: a new one when only a resource is given and the memory keeps threads."""
        ...

    def turn_tracer(self) -> SpanTracer:
        """Where the turn's spans go when the agent names no tracer of its own."""
        ...

    def open(self, message: Sequence[Any], context: Sequence[Message], *, name: str,
             register: Callable[[Memory], str], instructions: str, tools: list[dict[str, Any]], model: ChatModel, budget: PromptBudget | None,
             tracer: SpanTracer, thread_id: str | None, resource_id: str | None, scopes: tuple[str, ...],
             overrides: Mapping[str, Any], values: Mapping[str, Any]) -> TurnStart:
        """Check the request, prepare the input (messages or texts) and build the first prompt. ``name``: the agent's;
        ``register(memory)``: records the configuration the agent runs with and returns the name the
        reply carries."""
        ...

    def now(self) -> datetime | None:
        """The memory clock's time for the reply's stamp (None: the message's own default)."""
        ...

    def model_called(self, prompt: AssembledPrompt, usage: dict[str, Any] | None, finish_reason: str | None,
                     transport: Mapping[str, Any] | None = None, wire: str | None = None,
                     sent: bytes | None = None) -> None:
        """One model call went out with ``prompt`` (the turn record keeps it); ``transport``: the keys
        sent beside its request body (``stream``, ``stream_options``; empty when not streamed); ``wire``:
        how the model serialised the body (``core.llm.wire.WIRE_FORMS``; None: not known); ``sent``: the
        bytes its HTTP client actually sent (``ChatResult.sent``; None: not known)."""
        ...

    def next_prompt(self, tools: list[dict[str, Any]]) -> AssembledPrompt:
        """The prompt of the tool loop's next model call, from the same message list."""
        ...

    def run_tool(self, call: ToolCall, overrides: Mapping[str, Any]) -> dict[str, Any] | None:
        """The memory's own tools (working memory): the result for the model, or None when ``call``
        is not one of them."""
        ...

    def finish(self, finish_reason: str, *, failed: bool, writes: Sequence[Any] = ()) -> list[Message]:
        """Run the output side and save the turn (not when it ``failed``); returns what was saved. ``writes``:
        staged writes (``commit(conn)``) committed in the transaction that saves the turn."""
        ...


def turn_memory(mem: Memory | None) -> TurnMemory:
    """The one place "no memory" is decided: a ``Memory``'s turn, or the null memory."""
    return NullMemory() if mem is None else MemoryTurn(mem)


def traced(tracer: SpanTracer, name: str, kind: str, attrs: dict[str, Any], fn: Callable[[], Any],
           thread_id: str | None, resource_id: str | None) -> Any:
    """Run ``fn`` in a ``memory_operation``-style span whose output summarises what it returned."""
    with tracer.start_span(name, kind, attributes=attrs, thread_id=thread_id, resource_id=resource_id) as span:
        out = fn()
        if isinstance(out, AssembledPrompt):
            span.set_output({"fragments": len(out.fragments), "skipped": out.skipped,
                             "tokens": out.total_tokens})
        elif isinstance(out, list):
            span.set_output({"saved": [getattr(m, "id", None) for m in out]})
        elif hasattr(out, "success"):
            span.set_output({"success": out.success, "message": out.message})
        return out


class MemoryTurn:
    """One agent turn over a ``Memory``."""

    def __init__(self, memory: Memory) -> None:
        self.memory: Memory = memory
        self._ctx: ProcessorContext | None = None
        self._capture: TurnCapture | None = None
        self._processors: list[str] = []
        self._tracer: SpanTracer = NOOP_TRACER
        self._ids: tuple[str | None, str | None] = (None, None)

    @property
    def ctx(self) -> ProcessorContext:
        if self._ctx is None:
            raise RuntimeError("MemoryTurn.open() must run before the turn's other steps")
        return self._ctx

    def thread_for(self, thread_id: str | None, resource_id: str | None) -> str | None:
        if thread_id is None and resource_id is not None:
            return f"thread_{uuid.uuid4().hex[:16]}"  # Mastra gives every call without a thread a new one
        return thread_id

    def turn_tracer(self) -> SpanTracer:
        return self.memory.turn_tracer()

    def open(self, message: Sequence[Any], context: Sequence[Message], *, name: str,
             register: Callable[[Memory], str], instructions: str, tools: list[dict[str, Any]], model: ChatModel, budget: PromptBudget | None,
             tracer: SpanTracer, thread_id: str | None, resource_id: str | None, scopes: tuple[str, ...],
             overrides: Mapping[str, Any], values: Mapping[str, Any]) -> TurnStart:
        mem = self.memory
        self._tracer, self._ids = tracer, (thread_id, resource_id)
        # The turn's reads (overrides, thread, newest time, working memory, history) share one connection.
        with mem.store.db.reads():
            return self._open(message, context, name=name, register=register, instructions=instructions,
                              tools=tools, model=model, budget=budget, tracer=tracer, thread_id=thread_id,
                              resource_id=resource_id, scopes=scopes, overrides=overrides, values=values)

    def _open(self, message: Sequence[Any], context: Sequence[Message], *, name: str,
              register: Callable[[Memory], str], instructions: str, tools: list[dict[str, Any]], model: ChatModel,
              budget: PromptBudget | None, tracer: SpanTracer, thread_id: str | None, resource_id: str | None,
              scopes: tuple[str, ...], overrides: Mapping[str, Any], values: Mapping[str, Any]) -> TurnStart:
        mem = self.memory
        # Ownership is checked here, before any model call (and before anything is written).
        request = mem.request_context(thread_id=thread_id, resource_id=resource_id, options=overrides or None,
                                      scopes=[*scopes], values=values)
        name = register(mem)
        # Observational memory and titles fall back to the agent's model, as in Mastra.
        services = mem.services()
        services = replace(services, tracer=tracer, observer_model=services.observer_model or model,
                           title_model=services.title_model or model)
        ctx = self._ctx = mem.new_context(request, services=services)
        ctx.live = True
        if request.thread_id and not request.read_only:
            # Deleted, forgotten or taken by another owner while the turn runs: the save refuses, rather than make
            # the thread anew or write into another's.
            ctx.pending_writes.append(ThreadAsItStarted(
                request.thread_id, request.thread.resource_id if request.thread is not None else None,
                request.resource_id))
        ctx.budget = budget
        inputs = mem.prepare_input(ctx, input=message, instructions=instructions, context=context)
        prompt = traced(tracer, "memory: recall", "memory_operation", {"operationType": "recall"},
                        lambda: mem.run_input(ctx, extra_tools=tools), thread_id, resource_id)
        self._processors = list(prompt.processors)
        inputs = _as_stored(ctx, inputs)
        # The turn record (issues 10, 16): built from what this prompt used, completed by each model
        # call, committed in the transaction that saves the turn.
        self._capture = capture_turn(ctx, prompt, model=model)
        return TurnStart(inputs, prompt, name)

    def now(self) -> datetime | None:
        return to_ms(self.memory.clock.now())

    def model_called(self, prompt: AssembledPrompt, usage: dict[str, Any] | None, finish_reason: str | None,
                     transport: Mapping[str, Any] | None = None, wire: str | None = None,
                     sent: bytes | None = None) -> None:
        if self._capture is not None:
            self._capture.add_call(prompt, usage, finish_reason, transport, wire, sent)

    def next_prompt(self, tools: list[dict[str, Any]]) -> AssembledPrompt:
        return self.memory.record(self.ctx, self._processors, tools)

    def run_tool(self, call: ToolCall, overrides: Mapping[str, Any]) -> dict[str, Any] | None:
        if call.name not in WM_TOOL_NAMES:
            return None
        ctx, mem = self.ctx, self.memory
        if ctx.request.read_only:
            return {"success": False, "message": "Working memory is read-only in this session."}
        stage = self._working_memory_stage()
        thread_id, resource_id = self._ids
        outcome = traced(
            self._tracer, "memory: working-memory update", "memory_operation",
            {"operationType": "update-working-memory"},
            lambda: mem.apply_working_memory_tool(thread_id=thread_id, resource_id=resource_id, args=call.arguments,
                                                  overrides=overrides or None, stage=stage),
            thread_id, resource_id,
        )
        if outcome.reason is not None:  # the vNext tool answers with a reason, as Mastra's does
            return {"success": outcome.success, "reason": outcome.message, "updateReason": outcome.reason}
        return {"success": outcome.success, "message": outcome.message}

    def _working_memory_stage(self) -> StagedWorkingMemory:
        """This turn's staged working-memory updates: written with its messages, or not at all."""
        for write in self.ctx.pending_writes:
            if isinstance(write, StagedWorkingMemory):
                return write
        stage = StagedWorkingMemory(self.memory.working_memory_service)
        self.ctx.pending_writes.append(stage)
        return stage

    def finish(self, finish_reason: str, *, failed: bool, writes: Sequence[Any] = ()) -> list[Message]:
        ctx, mem = self.ctx, self.memory
        ctx.finish_reason = finish_reason
        if not failed and ctx.live:
            ctx.pending_writes.extend(writes)
        if self._capture is not None and not failed and ctx.live and not ctx.request.read_only:
            ctx.pending_writes.append(self._capture)  # the record lands in the transaction that saves the turn
        thread_id, resource_id = self._ids
        saved: list[Message] = traced(self._tracer, "memory: save", "memory_operation", {"operationType": "save"},
                                      lambda: mem.run_output(ctx), thread_id, resource_id)
        if not failed and ctx.pending_writes:
            # An output chain without the built-in saver left the staged writes behind.
            with mem.store.db.write() as conn:
                for write in ctx.pending_writes:
                    write.commit(conn)
            ctx.pending_writes.clear()
        return saved


def _as_stored(ctx: ProcessorContext, inputs: list[Message]) -> list[Message]:
    """The turn's inputs as its memory holds them after the input processors: observational memory may have stored
    an input before the model call (its stamp may have moved after the thread's newest message) or taken the input
    of a retry as the message a failed turn stored (``retriedInput``: the given id was never stored). What
    ``AgentResult.messages`` names is then what ``saved`` and the store hold."""
    retried = ctx.notes.get("observational-memory", {}).get("retriedInput") or {}
    swap = {retried["given"]: retried["stored"]} if retried.get("given") else {}
    out: list[Message] = []
    for msg in inputs:
        entry = ctx.messages.entry(swap.get(msg.id, msg.id))
        out.append(entry.message if entry is not None else msg)
    return out


class NullMemory:
    """An agent without memory: the prompt is the instructions, the context and the input; nothing is
    read, recalled or saved, no thread is made up, and no memory span is recorded."""

    memory: Memory | None = None

    def __init__(self) -> None:
        self._ml = MessageList()
        self._budget: PromptBudget | None = None
        # Skip reasons and notes of the prompt (the context window's, when the model has one).
        self._skipped: dict[str, str] = {}
        self._notes: dict[str, dict[str, Any]] = {}

    def thread_for(self, thread_id: str | None, resource_id: str | None) -> str | None:
        return thread_id

    def turn_tracer(self) -> SpanTracer:
        return NOOP_TRACER

    def open(self, message: Sequence[Any], context: Sequence[Message], *, name: str,
             register: Callable[[Memory], str], instructions: str, tools: list[dict[str, Any]], model: ChatModel, budget: PromptBudget | None,
             tracer: SpanTracer, thread_id: str | None, resource_id: str | None, scopes: tuple[str, ...],
             overrides: Mapping[str, Any], values: Mapping[str, Any]) -> TurnStart:
        ml, self._budget = self._ml, budget
        if instructions:
            ml.add_system(instructions, None, Provenance("instructions"))
        inputs = [m if isinstance(m, Message) else Message.user(str(m)) for m in message]
        for c in context:
            ml.add(c, "context", Provenance("context"))
        ml.add(inputs, "input", Provenance("input"))
        return TurnStart(inputs, self.next_prompt(tools), name)

    def now(self) -> datetime | None:
        return None

    def model_called(self, prompt: AssembledPrompt, usage: dict[str, Any] | None, finish_reason: str | None,
                     transport: Mapping[str, Any] | None = None, wire: str | None = None,
                     sent: bytes | None = None) -> None:
        return None

    def next_prompt(self, tools: list[dict[str, Any]]) -> AssembledPrompt:
        from core.prompt import build_prompt
        from core.tokens import default_tokenizer

        ml, budget, skipped, notes = self._ml, self._budget, self._skipped, self._notes

        def build() -> AssembledPrompt:
            return build_prompt(ml, tokenizer=default_tokenizer(), tools=tools, skipped=skipped, notes=notes,
                                options={}, processors=[],
                                context_window=budget.context_window if budget else 128_000)

        return build() if budget is None else fit_prompt(ml, build, budget, skipped, notes)

    def run_tool(self, call: ToolCall, overrides: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def finish(self, finish_reason: str, *, failed: bool, writes: Sequence[Any] = ()) -> list[Message]:
        return []  # nothing is saved, so nothing is saved with it
