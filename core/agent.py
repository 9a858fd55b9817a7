"""The agent runtime: input processors → model → tool loop → output processors, traced.

One turn = one ``Agent.generate`` call, or one ``Agent.stream`` iterated to its end: both run the
same generator of events (``generate`` drains it). The prompt each model call receives is the
engine's own ``AssembledPrompt`` (kept in ``result.prompts``), so what a trace or the Studio shows is
exactly what was sent. Working-memory updates run as a tool inside the loop. ``model_settings`` and
``tool_choice`` reach every request; a model that says its ``context_window`` gets every prompt
fitted into it (``core.context_window``).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Literal, Mapping, Sequence

from core.agent_errors import AgentError as AgentError
from core.agent_memory import TurnMemory, turn_memory
from core.agent_stream import AgentStream, StreamEvent
from core.context_window import PromptBudget
from core.ids import lone_surrogate
from core.llm.base import ChatModel, ChatResult, ModelError, ToolCall, Usage
from core.llm.providers import resolve_model
from core.llm.settings import ModelSettings, ToolChoice, parse_tool_choice
from core.llm.stopping import CallStop, CallStopped, armed
from core.llm.yielding import TRAFFIC
from core.memory import Memory, MemoryFactory, ThreadOwnershipError, parse_scopes, resolve_memory
from core.message_list import MessageList, Provenance
from core.messages import Message, new_id, text_part, tool_invocation_part
from core.model_call import ModelCall, request_body_for, stream_reply, transport_for, wire_form_of
from core.options import options_merge
from core.prompt import AssembledPrompt
from core.replay.record import request_hash
from core.scopes import SCOPES_KEY, check_client_resource, delegation_resource, run_scopes, scope_list
from core.storage.errors import StorageError
from core.storage.memory_store import InvalidArgumentError
from core.traces.tracer import NOOP_TRACER, SpanTracer, TracedSpan, tracing_disabled
from core.working_memory import TOOL_NAMES as WM_TOOL_NAMES

log = logging.getLogger(__name__)

#: What a turn's generator yields and returns.
TurnEvents = Generator[StreamEvent, None, "AgentResult"]

ToolFn = Callable[[dict[str, Any], "ToolContext"], Any]


@dataclass(frozen=True)
class Tool:
    """A function the model may call. ``parameters`` is a JSON Schema for its arguments."""

    name: str
    description: str
    fn: ToolFn
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def spec(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> "Tool":
        """A plain Python function as a tool: name, docstring and typed keyword parameters.

        The function is called with the model's arguments as keyword arguments.
        """
        sig = inspect.signature(fn)
        props: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in sig.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            props[pname] = {"type": _JSON_TYPES.get(param.annotation, "string")}
            if param.default is param.empty:
                required.append(pname)
        doc = inspect.getdoc(fn) or f"Call {fn.__name__}."

        def call(args: dict[str, Any], _ctx: "ToolContext") -> Any:
            return fn(**args)

        return cls(fn.__name__, doc, call, {"type": "object", "properties": props, "required": required})


_JSON_TYPES: dict[Any, str] = {
    int: "integer", float: "number", bool: "boolean", str: "string", dict: "object", list: "array",
    "int": "integer", "float": "number", "bool": "boolean", "str": "string", "dict": "object", "list": "array",
}


def as_tool(tool: Any) -> "Tool":
    if isinstance(tool, Tool):
        return tool
    if callable(tool):
        return Tool.from_function(tool)
    raise AgentError(f"A tool must be a Tool or a function, got {type(tool).__name__}.")


@dataclass
class ToolContext:
    agent: "Agent"
    thread_id: str | None
    resource_id: str | None
    scopes: tuple[str, ...]  # scopes other than resource:/thread:
    request_context: Mapping[str, Any]
    conversation: list[Message]


@dataclass
class AgentResult:
    text: str
    # This turn's new messages (input + response), as stored: an input memory stored before the model call, or a
    # retry's input taken as the message a failed turn stored, is named as the store holds it (as in ``saved``).
    messages: list[Message]
    prompts: list[AssembledPrompt]  # one per model call
    usage: Usage
    trace_id: str | None
    finish_reason: str
    thread_id: str | None
    resource_id: str | None
    saved: list[Message] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TurnOutcome:
    """A finished turn as ``save_with`` sees it, before it is saved: the reply's text (``AgentResult.text``),
    our finish reason, the usage summed over its model calls, the run's trace id, its thread and resource."""

    text: str
    finish_reason: str
    usage: Usage
    trace_id: str | None
    thread_id: str | None
    resource_id: str | None
    # The turn's prompts, one per model call, as ``AgentResult.prompts`` (their notes say what memory did).
    prompts: Sequence[AssembledPrompt] = ()


#: ``Agent.generate``'s ``save_with``: the finished turn -> a staged write saved in the turn's transaction.
SaveWith = Callable[[TurnOutcome], Any]


class TurnFailedError(AgentError, ModelError):
    """The model failed after tools had already run in this turn. Nothing of the turn was saved
    (messages and working memory alike), so it can be retried; the tools' own effects stand."""

    def __init__(self, cause: ModelError, tools_run: Sequence[str]) -> None:
        self.tools_run = list(tools_run)
        ModelError.__init__(self, cause.detail, model_id=cause.model_id, endpoint=cause.endpoint,
                            status=cause.status, hint=cause.hint, attempts=cause.attempts,
                            retryable=cause.retryable, method=cause.method)

    def _compose(self, *, hint: bool = True) -> str:
        ran = ", ".join(f"{name} (discarded)" if name in WM_TOOL_NAMES else name for name in self.tools_run)
        return (f"{ModelError._compose(self, hint=hint)}. Nothing of this turn was saved, so retrying will not "
                f"store the input twice; but these tools had already run, and what they did outside memory was not "
                f"undone: {ran}.")


class Agent:
    def __init__(
        self,
        name: str,
        *,
        instructions: str,
        model: ChatModel | str,
        memory: Memory | MemoryFactory | None = None,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        agents: Sequence["Agent"] | Mapping[str, "Agent"] = (),
        tracer: SpanTracer | Literal[False] | None = None,
        max_steps: int = 8,
        temperature: float | None = None,
        model_settings: ModelSettings | Mapping[str, Any] | None = None,
        register: bool = True,
        scopes: Sequence[str] | Callable[[Mapping[str, Any]], Sequence[str]] | None = None,
    ) -> None:
        """``model``: a ``ChatModel`` or a ``provider/model`` name (``"openai/gpt-4o-mini"``,
        ``"ollama/llama3.1"``...) resolved through ``core.llm.providers``; an unknown provider or a
        missing key is a ``ConfigurationError`` here. ``model_settings``: defaults for every call
        (``ModelSettings``: max_tokens, temperature, top_p, top_k, stop, seed, frequency/presence
        penalty); a call's own settings override them key by key. ``temperature`` is the same as
        ``model_settings={"temperature": ...}``. A memory with observational memory or generated
        titles and no model of its own for them uses this agent's model. ``register`` (default True):
        record the memory configuration this agent runs with (a memory factory's, per memory it
        resolves to) so the Studio can show it; a caller borrowing a registered agent passes False.
        ``scopes``: scopes of every run (``["org:acme"]``), or a function of the request context returning
        them; each run joins them with the call's ``scopes`` and the request context's ``SCOPES_KEY``
        (Mastra's agent ``scopes``). Give it values from server code, never from a client."""
        if not name or not isinstance(name, str):
            raise AgentError("An agent needs a name.")
        if scopes is not None and not callable(scopes):
            try:
                scope_list(scopes, f"The scopes of agent {name!r}")
            except ValueError as exc:
                raise AgentError(str(exc)) from None
        self.scopes = scopes
        self.name = name
        self.instructions = instructions
        self.model: ChatModel = resolve_model(model, what=f"model of agent {name!r}")
        self.memory = memory
        self.tools = {t.name: t for t in map(as_tool, tools)}
        # Sub-agents as a list, or as Mastra's {name: agent} mapping.
        self.sub_agents = dict(agents) if isinstance(agents, Mapping) else {a.name: a for a in agents}
        # None: the memory's turn tracer (by default the trace file beside the database); False: off.
        self.tracer = tracer
        self.max_steps = max_steps
        self.temperature = temperature
        self.model_settings = ModelSettings(temperature=temperature).merged(ModelSettings.parse(model_settings))
        self._registered: dict[int, tuple[str, str]] = {}  # id(memory) -> (registered name, config)
        self._registration_names: dict[str, str] = {}  # memory name -> the name it is registered under
        self.register = register
        if isinstance(memory, Memory) and register:
            self._register(memory)

    # -- public ----------------------------------------------------------------------------------
    def generate(
        self,
        message: str | Message | Sequence[Message],
        *,
        memory: Mapping[str, Any] | None = None,
        scopes: Sequence[str] | None = None,
        context: Sequence[Message] = (),
        options: Mapping[str, Any] | None = None,
        request_context: Mapping[str, Any] | None = None,
        model_settings: ModelSettings | Mapping[str, Any] | None = None,
        tool_choice: ToolChoice | None = None,
        save_with: SaveWith | None = None,
        stop: CallStop | None = None,
    ) -> AgentResult:
        """One turn. ``model_settings`` override the agent's per key; ``tool_choice``: "auto",
        "none", "required" or ``{"name": <tool>}`` (also Mastra's and OpenAI's object forms), applied
        to the turn's first model call (later calls of the tool loop use "auto", except "none").
        ``save_with``: given the finished turn's ``TurnOutcome``, a staged write (``commit(conn)``) committed
        in the transaction that saves the turn, so the turn and what the caller keeps about it (the gateway's
        idempotency key) are stored together or not at all; a write that raises leaves the turn unsaved.
        ``stop``: a ``CallStop`` another thread may trigger once nobody waits for the reply (the gateway, when its
        client leaves; the Studio's Stop): the model call in flight is stopped (a delegated sub-agent's too), no
        other starts, and the turn saves nothing (it raises ``CallStopped``) unless its save had begun."""
        _refuse_delegation_resource(memory, scopes)
        values = dict(request_context or {})
        return _drain(self._turn(resolve_memory(self.memory, values), message, memory=memory, scopes=scopes,
                                 context=context, options=options, values=values, parent_span=None,
                                 model_settings=model_settings, tool_choice=tool_choice, streaming=False,
                                 from_app=True, save_with=save_with, stop=stop))

    def stream(
        self,
        message: str | Message | Sequence[Message],
        *,
        memory: Mapping[str, Any] | None = None,
        scopes: Sequence[str] | None = None,
        context: Sequence[Message] = (),
        options: Mapping[str, Any] | None = None,
        request_context: Mapping[str, Any] | None = None,
        model_settings: ModelSettings | Mapping[str, Any] | None = None,
        tool_choice: ToolChoice | None = None,
        save_with: SaveWith | None = None,
        stop: CallStop | None = None,
    ) -> AgentStream:
        """The same turn as ``generate``, as ``StreamEvent``s while the model produces them (see
        ``core.agent_stream``). Nothing runs until the first event is asked for; the turn is saved
        once it completes, and not at all if it fails or the consumer stops early (``save_with`` and ``stop``: as
        ``generate``'s)."""
        _refuse_delegation_resource(memory, scopes)
        values = dict(request_context or {})
        return AgentStream(self._turn(resolve_memory(self.memory, values), message, memory=memory, scopes=scopes,
                                      context=context, options=options, values=values, parent_span=None,
                                      model_settings=model_settings, tool_choice=tool_choice, streaming=True,
                                      from_app=True, save_with=save_with, stop=stop))

    def _generate(
        self, mem: Memory | None, message: str | Message | Sequence[Message], *, memory: Mapping[str, Any] | None,
        scopes: Sequence[str] | None, context: Sequence[Message], options: Mapping[str, Any] | None,
        values: dict[str, Any], parent_span: TracedSpan | None, stop: CallStop | None = None,
    ) -> AgentResult:
        """One turn with ``mem`` already chosen (a delegation hands the sub-agent its memory this way,
        so one agent can serve several supervisors at once, and its supervisor's ``stop``)."""
        return _drain(self._turn(mem, message, memory=memory, scopes=scopes, context=context, options=options,
                                 values=values, parent_span=parent_span, model_settings=None, tool_choice=None,
                                 streaming=False, stop=stop))

    def _turn(
        self, mem: Memory | None, message: str | Message | Sequence[Message], *, memory: Mapping[str, Any] | None,
        scopes: Sequence[str] | None, context: Sequence[Message], options: Mapping[str, Any] | None,
        values: dict[str, Any], parent_span: TracedSpan | None, model_settings: ModelSettings | Mapping[str, Any] | None,
        tool_choice: ToolChoice | None, streaming: bool, from_app: bool = False, save_with: SaveWith | None = None,
        stop: CallStop | None = None,
    ) -> TurnEvents:
        """The turn as a generator of events; its return value is the result."""
        _refuse_unencodable(message, context)
        settings = self.model_settings.merged(ModelSettings.parse(model_settings))
        choice = parse_tool_choice(tool_choice, self._tool_names())
        # ``isinstance(self.model, WindowedModel)`` is exactly "has the attribute", but typing works out
        # the protocol's members anew on every check (~10 µs a check, three a turn): read it directly.
        window: int | None = getattr(self.model, "context_window", None)
        budget = PromptBudget.for_model(window, max_tokens=settings.max_tokens, model_id=self.model.model_id) \
            if window is not None else None
        mem_arg = dict(memory or {})
        own = self.scopes(values) if callable(self.scopes) else self.scopes
        scopes = run_scopes((values.get(SCOPES_KEY), f"The request context's {SCOPES_KEY!r}"),
                            (own, f"The scopes of agent {self.name!r}"), (scopes, "The call's scopes"),
                            resource_id=mem_arg.get("resource"), thread_id=mem_arg.get("thread"))
        resource_id, thread_id, other_scopes = parse_scopes(
            scopes, resource_id=mem_arg.get("resource"), thread_id=mem_arg.get("thread")
        )
        if from_app and resource_id is not None:  # (the agent's own scopes and the request context's too)
            check_client_resource(resource_id, advice=_APP_ADVICE)
        overrides = options_merge(mem_arg.get("options") or {}, options or {})
        turn = turn_memory(mem)
        thread_id = turn.thread_for(thread_id, resource_id)
        tracer = self._tracer_for(turn)
        # Leaving the root span (it ends then) wakes the exporter's background writer; the turn never
        # waits on the trace store (a busy DuckDB file only delays when the trace becomes visible).
        with tracer.start_span(
            f"agent run: '{self.name}'", "agent_run", parent=parent_span, new_trace=parent_span is None,
            input={"message": _describe_input(message)}, thread_id=thread_id, resource_id=resource_id,
            entity_type="agent", entity_id=self.name, entity_name=self.name,
            attributes={"model": self.model.describe(), **_run_attributes(values)},
        ) as run_span:
            try:
                result = yield from self._run(turn, message, thread_id, resource_id, other_scopes, overrides, context,
                                              values, tracer, ModelCall(settings, choice, budget, streaming),
                                              save_with=save_with, trace_id=run_span.trace_id or None, stop=stop)
            except GeneratorExit:
                run_span.end(error="the stream was closed before the turn completed; nothing was saved")
                raise
            run_span.set_output({"text": result.text, "finishReason": result.finish_reason})
            run_span.set_attributes({"usage": result.usage.__dict__})
            result.trace_id = run_span.trace_id or None
        yield StreamEvent("finish", text=result.text, finish_reason=result.finish_reason, usage=result.usage,
                          result=result)
        return result

    def _register(self, mem: Memory) -> str:
        """Record the configuration ``mem`` resolves to, so the Studio can show it and chat as this
        agent; returns the name it is registered under (what its replies name as their agent).

        A memory factory may pick a different memory per request (by user tier...): each memory it
        resolves to is registered once per process. The first memory is registered under the agent's
        name; a memory with another name than the first, under ``<agent>:<memory name>``."""
        names = self._registration_names
        name = names.setdefault(mem.name, self.name if not names else f"{self.name}:{mem.name}")
        known = self._registered.get(id(mem))
        # The agent's model settings and own tools (sub-agents as the tools they are offered as) go with it.
        settings = self.model_settings.to_dict()
        tools = [*self.tools, *(f"agent-{sub}" for sub in self.sub_agents)]
        config = json.dumps([mem.describe(), settings, tools], sort_keys=True, default=str) \
            if known is None or known[0] != name else known[1]
        if known is None or known != (name, config):
            try:
                mem.register(name, instructions=self.instructions, model_settings=settings, tools=tools)
            except StorageError as exc:  # a state the user can act on (read-only, busy, disk full): one line
                log.warning("agent %r could not register its memory configuration: %s", self.name, exc)
            except Exception:  # noqa: BLE001 - the Studio's registry must never fail a turn
                log.warning("agent %r could not register its memory configuration", self.name, exc_info=True)
        self._registered[id(mem)] = (name, config)
        return name

    def _tracer_for(self, turn: TurnMemory) -> SpanTracer:
        """Every run is traced unless tracing was turned off (``tracer=False`` or
        ``$MEMORY_STUDIO_TRACING=off``): by default into the DuckDB file beside the memory database."""
        if self.tracer is False or tracing_disabled():
            return NOOP_TRACER
        if self.tracer is not None:
            return self.tracer
        return turn.turn_tracer()

    # -- the turn --------------------------------------------------------------------------------
    def _run(
        self, turn: TurnMemory, message: Any, thread_id: str | None, resource_id: str | None,
        scopes: tuple[str, ...], overrides: Mapping[str, Any], context: Sequence[Message],
        values: Mapping[str, Any], tracer: SpanTracer, call: ModelCall, *, save_with: SaveWith | None = None,
        trace_id: str | None = None, stop: CallStop | None = None,
    ) -> TurnEvents:
        # Armed: observational memory's observer or reflector, when it runs in the turn, is stopped with it.
        with armed(stop):
            started = turn.open(
                _as_messages(message), context, name=self.name,
                register=lambda mem: self._register(mem) if self.register else self.name,
                instructions=self.instructions, tools=self._tool_specs(), model=self.model, budget=call.budget,
                tracer=tracer, thread_id=thread_id, resource_id=resource_id, scopes=scopes, overrides=overrides,
                values=values)
        inputs, prompt = started.inputs, started.prompt
        messages_list = prompt.message_list
        assert messages_list is not None
        latest_input = max((m.created_at for m in inputs), default=None) if inputs else None
        answered_at = turn.now()
        if answered_at is not None and latest_input is not None and answered_at <= latest_input:
            answered_at = latest_input + timedelta(milliseconds=1)
        response = Message.create("assistant", [], thread_id=thread_id, resource_id=resource_id,
                                  created_at=answered_at,
                                  metadata={"agent": started.agent_name, "modelId": self.model.model_id})
        prompts: list[AssembledPrompt] = [prompt]
        usage = Usage(0, 0, 0)
        finish_reason = "stop"
        tool_results: list[dict[str, Any]] = []
        text_out: list[str] = []
        error: BaseException | None = None
        for step in range(self.max_steps):
            try:
                result = yield from self._model_step(tracer, prompt, thread_id, resource_id, call, step, stop)
            except ModelError as exc:
                error, finish_reason = exc, "error"
                break
            turn.model_called(prompt, result.usage.to_dict() if result.usage else None, result.finish_reason,
                              transport_for(self.model, call.streaming), wire_form_of(self.model), result.sent)
            if result.usage:
                usage = Usage(usage.prompt_tokens + result.usage.prompt_tokens,
                              usage.completion_tokens + result.usage.completion_tokens,
                              usage.total_tokens + result.usage.total_tokens)
            parts = list(response.parts)
            parts.append({"type": "step-start", "model": result.model_id or self.model.model_id})
            for tc in result.tool_calls:
                yield StreamEvent("tool-call", tool_call_id=tc.id, tool_name=tc.name, args=dict(tc.arguments))
                try:
                    outcome = self._execute(tc, turn, thread_id, resource_id, scopes, values, messages_list,
                                            overrides, tracer, stop)
                except ModelError as exc:
                    if stop is None or not stop.stopped:
                        raise
                    # A delegation stopped with its supervisor's turn (its own tools may have run: TurnFailedError).
                    error = exc if isinstance(exc, CallStopped) else CallStopped(str(stop.reason),
                                                                                 model_id=self.model.model_id)
                    finish_reason = "error"
                    break
                tool_results.append({"tool": tc.name, "args": tc.arguments, "result": outcome})
                # A tool that returned None has answered too (sent as null): never a call left unanswered.
                parts.append(tool_invocation_part(tc.id, tc.name, tc.arguments, _jsonable(outcome), state="result"))
                yield StreamEvent("tool-result", tool_call_id=tc.id, tool_name=tc.name, args=dict(tc.arguments),
                                  output=_jsonable(outcome))
            if error is not None:
                break
            if result.text:
                parts.append(text_part(result.text))
                text_out.append(result.text)
            response = response.copy(content={**response.content, "parts": parts,
                                               "content": " ".join(text_out) if text_out else ""})
            messages_list.add(response, "response", Provenance("response"))
            finish_reason = result.finish_reason or "stop"
            if not result.tool_calls:
                break
            prompt = turn.next_prompt(self._tool_specs())
            prompts.append(prompt)
        else:
            finish_reason = "max-steps"
        if stop is not None and stop.stopped and error is None:
            # Nobody waits for the reply (a tool ran, or the reply came, after its client left): not saved.
            error, finish_reason = CallStopped(str(stop.reason), model_id=self.model.model_id), "error"

        writes = [save_with(TurnOutcome(" ".join(text_out), finish_reason, usage, trace_id, thread_id, resource_id,
                                         tuple(prompts)))] \
            if save_with is not None and error is None else []
        saved = turn.finish(finish_reason, failed=error is not None, writes=writes)
        if error is not None:
            if tool_results and isinstance(error, ModelError):
                raise TurnFailedError(error, [r["tool"] for r in tool_results]) from error
            raise error
        new_messages = [*inputs, response] if response.parts else list(inputs)
        return AgentResult(
            text=" ".join(text_out), messages=new_messages, prompts=prompts, usage=usage, trace_id=None,
            finish_reason=finish_reason, thread_id=thread_id, resource_id=resource_id, saved=saved,
            tool_results=tool_results,
        )

    def _model_step(self, tracer: SpanTracer, prompt: AssembledPrompt, thread_id: str | None,
                    resource_id: str | None, call: ModelCall, step: int,
                    stop: CallStop | None = None) -> Generator[StreamEvent, None, ChatResult]:
        """One model call, streamed (text deltas yielded as they arrive) or not; the same span either way.
        ``stop``: armed for this call (``core.llm.stopping``); memory's calls in the turn's opening are too."""
        kwargs = call.model_kwargs(prompt, step)
        prompt.request = request_body_for(self.model, prompt.messages, kwargs)  # what the server receives
        prompt.request_hash = request_hash(prompt.request)  # the span's and the turn record's
        attributes = {"model": self.model.model_id, "provider": self.model.provider,
                      "promptTokensEstimated": prompt.total_tokens, "tokenizer": prompt.tokenizer,
                      "modelSettings": call.settings.to_dict(), "requestHash": prompt.request_hash}
        if "tool_choice" in kwargs:
            attributes["toolChoice"] = kwargs["tool_choice"]
        if call.budget is not None:
            attributes["contextWindow"] = call.budget.context_window
        with tracer.start_span(
            f"llm: '{self.model.model_id}'", "model_generation", input={"messages": prompt.messages,
                                                                        "tools": prompt.tools},
            thread_id=thread_id, resource_id=resource_id, attributes=attributes,
        ) as span:
            # The turn's call takes its server: background memory calls there give way (``core.llm.yielding``).
            with TRAFFIC.foreground(self.model) as server, armed(stop):
                if stop is not None:
                    stop.check(self.model.model_id)  # no call starts for a turn nobody waits for
                if said := server.span_attributes():
                    span.set_attributes(said)
                if call.streaming:
                    try:
                        result = yield from stream_reply(self.model, prompt.messages, kwargs)
                    except GeneratorExit:
                        span.end(error="the stream was closed while the model was replying")
                        raise
                else:
                    result = self.model.generate(prompt.messages, **kwargs)
            span.set_output({"text": result.text, "toolCalls": [c.to_message_dict() for c in result.tool_calls]})
            span.set_attributes({"usage": result.usage.to_dict() if result.usage else None,
                                 "finishReason": result.finish_reason,
                                 "responseModel": result.raw.get("model") if isinstance(result.raw, dict) else None})
            return result

    def _execute(
        self, call: ToolCall, turn: TurnMemory, thread_id: str | None, resource_id: str | None,
        scopes: tuple[str, ...], values: Mapping[str, Any], ml: MessageList, overrides: Mapping[str, Any],
        tracer: SpanTracer, stop: CallStop | None = None,
    ) -> Any:
        if call.arguments_error:
            return {"error": f"Your arguments for {call.name} could not be read ({call.arguments_error}). "
                             "Send them again as a JSON object."}
        own = turn.run_tool(call, overrides)  # the memory's own tools (working memory) first
        if own is not None:
            return own
        if call.name.startswith("agent-") and call.name[6:] in self.sub_agents:
            return self._delegate(self.sub_agents[call.name[6:]], call, turn.memory, resource_id, scopes, ml, tracer,
                                  stop)
        tool = self.tools.get(call.name)
        if tool is None:
            return {"error": f"There is no tool named {call.name!r}. Available: {', '.join(self._tool_names())}."}
        tctx = ToolContext(self, thread_id, resource_id, scopes, values, ml.messages())

        def run() -> Any:
            try:
                return tool.fn(dict(call.arguments), tctx)
            except Exception as exc:  # noqa: BLE001 - a failing tool is reported to the model, not fatal
                log.warning("tool %r of agent %r failed; the model gets the error", call.name, self.name, exc_info=True)
                return {"error": f"{type(exc).__name__}: {exc}"}

        with tracer.start_span(f"tool: '{call.name}'", "tool_call", input=call.arguments,
                               thread_id=thread_id, resource_id=resource_id,
                               attributes={"toolCallId": call.id, "toolName": call.name}) as span:
            out = run()
            span.set_output(_jsonable(out))
            return out

    def _delegate(self, sub: "Agent", call: ToolCall, mem: Memory | None, resource_id: str | None,
                  scopes: tuple[str, ...], ml: MessageList, tracer: SpanTracer, stop: CallStop | None = None) -> Any:
        """A delegation: a fresh thread, resource ``delegation:<parent>:<agent>`` (``delegation_resource``: a
        namespace no client may name, unlike Mastra's ``<parent>-<agent>``, which a user's own id can equal),
        the supervisor's memory unless the sub-agent has its own; only the delegation prompt and the reply
        are saved. The run's scopes other than ``resource:`` / ``thread:`` go with it (as Mastra's), and its
        ``stop``: the sub-agent's model calls are stopped with the supervisor's turn (``CallStopped``)."""
        prompt_text = str(call.arguments.get("prompt") or call.arguments.get("task") or "")
        if not prompt_text:
            return {"error": "Delegation needs a 'prompt' argument."}
        child_resource = delegation_resource(resource_id, sub.name)
        child_thread = f"{sub.name}-{new_id()}"
        # The memory is passed, never assigned to the sub-agent: it may serve other supervisors
        # (with other memories) at the same time.
        sub_mem = resolve_memory(sub.memory, {}) if sub.memory is not None else mem
        # Titles are the top-level thread's: on the supervisor's memory a delegation thread (a throwaway
        # no one browses) is not named, which would cost a model call per delegation (as Mastra).
        inherited = {"generate_title": False} if sub.memory is None else None
        forwarded = [m.copy(id=f"ctx-{m.id}", thread_id=None, resource_id=None) for m in ml.messages("memory", "input")]
        result = sub._generate(sub_mem, prompt_text, memory={"resource": child_resource, "thread": child_thread},
                               scopes=scopes, context=forwarded, options=inherited, values={},
                               parent_span=tracer.current_span(), stop=stop)
        return {"agent": sub.name, "thread": child_thread, "resource": child_resource, "text": result.text}

    def _tool_specs(self) -> list[dict[str, Any]]:
        specs = [t.spec() for t in self.tools.values()]
        for sub in self.sub_agents.values():
            specs.append({"type": "function", "function": {
                "name": f"agent-{sub.name}",
                "description": f"Delegate a task to the {sub.name} agent and get its answer.",
                "parameters": {"type": "object", "properties": {"prompt": {"type": "string",
                               "description": "What the agent should do, with the context it needs."}},
                               "required": ["prompt"]},
            }})
        return specs

    def _tool_names(self) -> list[str]:
        return [s["function"]["name"] for s in self._tool_specs()] + list(WM_TOOL_NAMES)


def _drain(events: TurnEvents) -> "AgentResult":
    """Run a turn's generator to its end (``generate``): the events are not needed, the result is."""
    while True:
        try:
            next(events)
        except StopIteration as stop:
            result: AgentResult = stop.value
            return result


def _as_messages(message: Any) -> list[Any]:
    if isinstance(message, (str, Message)):
        return [message]
    return list(message)


#: What an application told that its caller named a delegation's resource should do.
_APP_ADVICE = ("An application passing its users' ids to Agent.generate or Agent.stream (memory={'resource': ...} "
               "or a 'resource:' scope) should refuse such an id where it takes it, or pass its own id for the user "
               "(core.check_client_resource does the check). A delegation's own memory is read with Memory's calls "
               "under the id its tool result names, or in the Studio.")


def _refuse_delegation_resource(memory: Mapping[str, Any] | None, scopes: Sequence[str] | None) -> None:
    """A turn an application starts (``generate``, ``stream``) may not run on a delegation's resource: an
    application passing its end user's id through would let a user named ``delegation:alice:helper`` read and
    write the memory Alice's sub-agent keeps of her turns. Delegations start their turns through ``_generate``,
    which does not ask. Checked when the call is made, before anything is read (a stream's too)."""
    named = [(memory or {}).get("resource")]
    named += [s.split(":", 1)[1] for s in scopes or () if isinstance(s, str) and s.startswith("resource:")]
    for resource in named:
        if isinstance(resource, str):
            check_client_resource(resource, advice=_APP_ADVICE)


def _refuse_unencodable(message: Any, context: Sequence[Any]) -> None:
    """Text no UTF-8 can hold (a lone surrogate) is refused before anything runs: it could be neither
    stored nor traced, nor sent to a model."""
    for item in [*_as_messages(message), *context]:
        problem = lone_surrogate(item.content if isinstance(item, Message) else item)
        if problem is not None:
            raise InvalidArgumentError(f"The input holds {problem}; decode the text properly (or replace the "
                                       "character) before sending it. Nothing was run or saved.")


#: The request context's key, and the run span's attribute, naming the request fields a gateway turn did not use.
IGNORED_BY_GATEWAY = "ignoredByGateway"


def _run_attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """What the request context says of the request, as the run span's attributes: who asked for the turn
    (``"caller"``: the gateway puts the name of the request's token there) and what of the request was not
    used (``IGNORED_BY_GATEWAY``: the gateway's request fields the model was not sent,
    ``core.gateway.turns.ignored_fields``)."""
    out: dict[str, Any] = {}
    caller = values.get("caller")
    if isinstance(caller, str):
        out["caller"] = caller
    ignored = values.get(IGNORED_BY_GATEWAY)
    if isinstance(ignored, list) and ignored:
        out[IGNORED_BY_GATEWAY] = [str(name) for name in ignored]
    return out


def _describe_input(message: Any) -> Any:
    if isinstance(message, str):
        return message
    if isinstance(message, Message):
        return message.text
    return [m.text if isinstance(m, Message) else str(m) for m in message]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


__all__ = ["Agent", "AgentError", "AgentResult", "Tool", "ToolContext", "ThreadOwnershipError", "TurnFailedError",
           "as_tool"]
