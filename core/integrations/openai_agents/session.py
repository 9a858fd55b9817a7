"""``MemorySession``: the OpenAI Agents SDK's ``Session`` protocol over one of our threads.

    from agents import Agent, Runner
    from core import Memory, open_store
    from core.integrations.openai_agents import MemorySession

    memory = Memory(open_store(), {"working_memory": {"enabled": True}})
    session = MemorySession("groceries", memory=memory, resource_id="ada")
    agent = Agent(name="chef", instructions="You are a helpful cook.", tools=session.tools())
    result = await Runner.run(agent, "What can I eat?", session=session, run_config=session.run_config())

The session id is the thread id; the thread belongs to ``resource_id`` (the ownership rule of every
other entry point applies: another resource's thread is refused before anything is read or written).
Every item the SDK stores becomes one of our messages (``items.py``), so the Studio, recall and our
own ``Agent`` see the conversation. ``run_config()`` adds, before each model call, what the memory
processors give (working memory, recall from other threads, observational memory) to the agent's
instructions, and mirrors the run's trace into the trace store beside the database
(``tracing.py``). ``tools()`` offers the model the working-memory update tool.

A run config belongs to its session: used in a run of another session it refuses to add its memory
(the model is not called). With ``MemoryOptions(read_only=True)`` (Mastra's ``readOnly``) the session
reads memory and the thread but saves no item and deletes none.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agents import FunctionTool, Model, ModelProvider, RunConfig, RunContextWrapper
from agents.tracing import get_current_trace
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit
from agents.models.multi_provider import MultiProvider
from agents.run_config import CallModelData, ModelInputData
from agents.tool_context import ToolContext

from core.integrations.openai_agents.capture import FRAMEWORK, RUN, SdkTurn, TurnWrite, resolved, turn_for, watch
from core.integrations.openai_agents.items import (
    as_item,
    call_arguments,
    call_names,
    item_to_message,
    latest_user_text,
    messages_to_items,
)
from core.integrations.openai_agents.tracing import SENT_INSTRUCTIONS, SESSION_KEY, trace_processor
from core.memory import Memory
from core.messages import Message
from core.prompt import AssembledPrompt
from core.replay import store as records
from core.scopes import check_client_resource
from core.storage import AlreadyExistsError, InvalidArgumentError, NotFoundError
from core.traces.tracer import NOOP_TRACER, SpanType
from core.working_memory import TOOL_NAMES as WM_TOOL_NAMES

log = logging.getLogger(__name__)

#: Prompt fragments that are the conversation or the agent's own text, not memory.
_NOT_MEMORY = ("instructions", "input", "context", "tools")


@dataclass
class _RunSession:
    """Which MemorySession the Runner was given, seen from inside a run: set when the Runner calls
    one of the session's methods (it passes its run context), read by the run config's memory filter
    and the working-memory tool. A run's trace (the SDK makes a no-op one when tracing is off) tells
    this run's record from one an earlier run of the same task left behind."""

    thread_id: str
    resource_id: str
    traces: list[Any] = field(default_factory=list)


_RUN_SESSION: contextvars.ContextVar[_RunSession | None] = contextvars.ContextVar("memory_studio_run_session",
                                                                                  default=None)


class MemorySession:
    """The SDK's session protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``)
    over thread ``session_id`` of ``resource_id`` in ``memory``'s database."""

    def __init__(
        self,
        session_id: str,
        *,
        memory: Memory,
        resource_id: str,
        title: str = "",
        memory_instructions: bool = True,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not session_id or not resource_id:
            raise InvalidArgumentError("MemorySession needs a session id (the thread) and a resource id (its owner).")
        # An application's user id passed through must not reach a delegation's memory (``Agent.generate`` too).
        check_client_resource(resource_id, advice=(
            "An application passing its users' ids as MemorySession's resource_id should refuse such an id where it "
            "takes it (core.check_client_resource does the check), or pass its own id for the user."))
        self.session_id = session_id
        self.resource_id = resource_id
        self.memory = memory
        self.title = title
        self.memory_instructions = memory_instructions
        self.session_settings = session_settings
        self._key = uuid.uuid4().hex
        self._agent: str | None = None  # the SDK agent whose model call came last: it answers next
        self._registered: dict[str, str] = {}  # agent name → what was registered with it (instructions, settings, tools)
        self._processor = trace_processor()
        self._processor.register(self._key, self)

    # -- the Session protocol --------------------------------------------------------------------
    # ``wrapper``: the run context the Runner passes (SDK ≥ 0.24, to sessions that take it); the
    # session then knows it is the one this run was given (``_RunSession``).
    async def get_items(self, limit: int | None = None, wrapper: RunContextWrapper[Any] | None = None) -> list[Any]:
        """The thread's items, oldest first; with ``limit`` (else ``session_settings.limit``, as the
        SDK's own sessions do), the newest ``limit`` of them."""
        self._mark_run(wrapper)
        return await asyncio.to_thread(self._get_items, resolve_session_limit(limit, self.session_settings))

    async def add_items(self, items: list[Any], wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Save the items as messages of the thread; with ``MemoryOptions(read_only=True)`` nothing is
        saved (memory is read, as in Mastra's ``readOnly``: the next run does not see these items)."""
        self._mark_run(wrapper)
        if not items:
            return
        plain = [as_item(i) for i in items]
        turn = self._turn(create=True) if wrapper is not None else None  # only the Runner passes ``wrapper``
        parent, tracer = self._processor.current()
        with tracer.start_span("memory: save", SpanType.MEMORY_OPERATION, parent=parent,
                               attributes={"operationType": "save-messages", "framework": "openai-agents"}) as span:
            if self.read_only:
                span.set_output({"saved": [], "items": len(plain), "readOnly": True})
                return
            saved = await asyncio.to_thread(self._add_items, plain, turn)
            span.set_output({"saved": [m.id for m in saved], "items": len(plain)})

    async def pop_item(self, wrapper: RunContextWrapper[Any] | None = None) -> Any | None:
        """Remove the newest stored message and return its (last) item; None when the thread is empty."""
        self._mark_run(wrapper)
        self._refuse_if_read_only("pop_item")
        return await asyncio.to_thread(self._pop_item)

    async def clear_session(self, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Delete the thread's messages (the thread, its title and its working memory stay)."""
        self._mark_run(wrapper)
        self._refuse_if_read_only("clear_session")
        await asyncio.to_thread(self._clear)

    @property
    def read_only(self) -> bool:
        """``MemoryOptions(read_only=True)``: the session reads the thread and memory, saves and deletes nothing."""
        return bool(self.memory.options.read_only)

    def _refuse_if_read_only(self, what: str) -> None:
        if self.read_only:
            raise InvalidArgumentError(
                f"{what} deletes nothing: the memory of session {self.session_id!r} is read-only "
                "(MemoryOptions(read_only=True)). Use a memory without read_only to change the thread.")

    def _mark_run(self, wrapper: RunContextWrapper[Any] | None) -> None:
        """Note, for this run, that the Runner was given this session (only the Runner passes ``wrapper``)."""
        if wrapper is None:
            return
        if RUN.get() is not wrapper:  # a new run in this task (``capture.RUN``)
            RUN.set(wrapper)
        trace = get_current_trace()
        record = _RUN_SESSION.get()
        if record is None or (record.thread_id, record.resource_id) != (self.session_id, self.resource_id):
            record = _RunSession(self.session_id, self.resource_id)
            _RUN_SESSION.set(record)
        if not any(t is trace for t in record.traces):
            record.traces.append(trace)
            del record.traces[:-8]

    def _turn(self, *, create: bool) -> SdkTurn | None:
        """The SDK run going on now on this session's thread (``capture.turn_for``)."""
        return turn_for(self.session_id, self.resource_id, create=create)

    def _arm(self, agent: Any, config_model: Any = None, instructions: str | None = None) -> None:
        """A model call of this run is about to be made: what it sends is kept for the turn's record
        (``capture``); the hook that reads it is added to its model's client when it has one. The
        model is the SDK's choice: the run config's (``config_model``), else the agent's; a name is
        resolved by the run's provider (``_Watching``)."""
        model = config_model if config_model is not None else getattr(agent, "model", None)
        if isinstance(model, Model):
            watch(model)
        turn = self._turn(create=True)
        if turn is not None:
            turn.arm(model if isinstance(model, Model) else None, instructions)

    @staticmethod
    def _run_session() -> _RunSession | None:
        """The MemorySession the running SDK run was given, when the Runner has called it in this run."""
        record = _RUN_SESSION.get()
        trace = get_current_trace()
        if record is None or trace is None or not any(t is trace for t in record.traces):
            return None
        return record

    # -- running with memory ---------------------------------------------------------------------
    def run_config(self, **settings: Any) -> RunConfig:
        """A ``RunConfig`` for ``Runner.run(..., session=self, run_config=...)``: memory as instructions
        before each model call, and the run's trace in our trace store (thread and resource set).
        ``settings`` are other ``RunConfig`` fields; a ``trace_metadata`` given is kept."""
        metadata = {**dict(settings.pop("trace_metadata", None) or {}), SESSION_KEY: self._key,
                    "threadId": self.session_id, "resourceId": self.resource_id}
        settings.setdefault("workflow_name", "openai-agents")
        settings.setdefault("group_id", self.session_id)
        given = settings.get("call_model_input_filter")
        inner = given if given is not None else self._memory_input if self.memory_instructions else None
        settings["call_model_input_filter"] = _Arming(self, inner, settings.get("model"))
        # What each model call sends is read at the wire, on the client of the model the run uses.
        if isinstance(settings.get("model"), Model):
            watch(settings["model"])
        provider = settings.get("model_provider")
        settings["model_provider"] = _Watching(provider if provider is not None else MultiProvider())
        return RunConfig(trace_metadata=metadata, **settings)

    async def add_memory(self, data: CallModelData[Any]) -> ModelInputData:
        """The SDK's ``call_model_input_filter``: the agent's instructions plus what the memory
        processors add for this thread and the newest user message (the conversation itself comes
        from the session, so message history is not added twice)."""
        out = await self._memory_input(data)
        self._arm(data.agent, instructions=out.instructions)
        return out

    async def _memory_input(self, data: CallModelData[Any]) -> ModelInputData:
        """``add_memory`` without keeping the call for the turn's record (``_Arming`` keeps it)."""
        model_data = data.model_data
        running = self._run_session()
        if running is not None and (running.thread_id, running.resource_id) != (self.session_id, self.resource_id):
            # Another user's (or thread's) run: this session's memory must not reach its model.
            raise InvalidArgumentError(
                f"The run config of session {self.session_id!r} (resource {self.resource_id!r}) was used in a run "
                f"of session {running.thread_id!r} (resource {running.resource_id!r}); its memory was not added "
                "and the model was not called. Pass each run the run config of the session it runs with: "
                "Runner.run(agent, input, session=session, run_config=session.run_config()).")
        await self._register(data.agent)
        parent, tracer = self._processor.current()
        with tracer.start_span("memory: recall", SpanType.MEMORY_OPERATION, parent=parent,
                               attributes={"operationType": "recall", "framework": "openai-agents"}) as span:
            prompt = await asyncio.to_thread(self._memory_prompt, latest_user_text(model_data.input))
            blocks = memory_blocks(prompt)
            output: dict[str, Any] = {"fragments": [f.source for f in prompt.fragments if f.role == "system"
                                                    and f.source not in _NOT_MEMORY],
                                      "skipped": prompt.skipped, "tokens": prompt.total_tokens}
            recall = prompt.notes.get("semantic-recall")
            if recall:  # which thread recall left out (the session's own), what it passed over and found
                shown = ("query", "hits", "excluded_thread", "excluded", "passed_over")
                output["recall"] = {k: recall[k] for k in shown if k in recall}
            span.set_output(output)
        instructions = "\n\n".join(t for t in (model_data.instructions, *blocks) if t)
        trace = get_current_trace()
        SENT_INSTRUCTIONS.set((trace.trace_id, instructions or None) if trace is not None else None)
        return ModelInputData(input=model_data.input, instructions=instructions or None)

    async def _register(self, agent: Any) -> None:
        """Record this memory's configuration under the SDK agent's name, as our own ``Agent`` does,
        and name that agent on the replies saved next: the Studio's prompt inspector and
        ``memory-studio prompt`` then show the thread with the options its model calls ran with
        (working memory, recall...), not the engine's defaults."""
        name = getattr(agent, "name", None)
        if not isinstance(name, str) or not name:
            return
        self._agent = name
        instructions = getattr(agent, "instructions", None)
        text = instructions if isinstance(instructions, str) else None  # a function's output varies by run
        settings = _settings_of(agent)
        tools = _own_tools(agent)
        key = json.dumps([text, settings, tools], sort_keys=True, default=str)
        if self._registered.get(name) == key:
            return
        try:
            await asyncio.to_thread(self.memory.register, name, instructions=text, model_settings=settings,
                                    tools=tools)
        except Exception:  # noqa: BLE001 - the Studio's registry must never fail a run
            log.warning("could not register the memory configuration of agent %r", name, exc_info=True)
        self._registered[name] = key

    def tools(self) -> list[FunctionTool]:
        """The working-memory update tool (``updateWorkingMemory``), when the memory lets the model
        update working memory; else none. Give it to the agent: ``Agent(..., tools=session.tools())``."""
        spec = self.memory.working_memory_tool()
        if spec is None:
            return []
        function = spec["function"]

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            given = self._run_session()  # the session the Runner was given, else the run config's
            configured = self._processor.current_session() if given is None else None
            running = ((given.thread_id, given.resource_id) if given is not None else
                       (configured.session_id, configured.resource_id) if configured is not None else None)
            if running is not None and running != (self.session_id, self.resource_id):
                # An agent built once with one session's tools, run for another user: writing here
                # would put that user's facts into this resource's working memory.
                raise InvalidArgumentError(
                    f"The working-memory tool of session {self.session_id!r} (resource {self.resource_id!r}) was "
                    f"called in a run of session {running[0]!r} (resource {running[1]!r}); "
                    "nothing was written. Give each run an agent with the tools of the session it runs with: "
                    "Agent(..., tools=session.tools()).")
            try:
                args = json.loads(arguments) if arguments else {}
            except ValueError as exc:
                return json.dumps({"success": False, "message": f"The arguments were not valid JSON: {exc}"})
            outcome = await asyncio.to_thread(
                self.memory.apply_working_memory_tool, thread_id=self.session_id, resource_id=self.resource_id,
                args=args)
            return json.dumps({"success": outcome.success, "message": outcome.message})

        return [FunctionTool(name=function["name"], description=function.get("description", ""),
                             params_json_schema=function["parameters"], on_invoke_tool=invoke,
                             strict_json_schema=False)]

    # -- on a worker thread ----------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        try:
            return self.memory.recall(thread_id=self.session_id, resource_id=self.resource_id,
                                      per_page=False).messages
        except NotFoundError:
            return []

    def _newest(self, n: int) -> list[Message]:
        """``_messages()[-n:]``, reading only the newest ``n`` rows (a long session is read whole only to
        list it whole): the thread's last ``n`` messages, oldest first."""
        try:
            found = self.memory.recall(thread_id=self.session_id, resource_id=self.resource_id, last_messages=n)
        except NotFoundError:
            return []
        if found.unreadable and found.total > n:  # a row that does not parse took a place: read them all
            return self._messages()[-n:]
        return found.messages

    def _get_items(self, limit: int | None) -> list[Any]:
        if limit is not None:
            if limit <= 0:
                return []
            items = messages_to_items(self._newest(limit))  # a message holds one item or more
            return items[-limit:]
        return messages_to_items(self._messages())

    def _add_items(self, items: Sequence[Mapping[str, Any]], turn: SdkTurn | None = None) -> list[Message]:
        newest = self._newest(50)
        if turn is not None:
            self._continues(turn, newest, items)
        recent = messages_to_items(newest)
        names = call_names(recent) | call_names(items)
        args = call_arguments(recent) | call_arguments(items)
        if self.memory.get_thread(self.session_id) is None:
            try:
                self.memory.create_thread(resource_id=self.resource_id, thread_id=self.session_id, title=self.title,
                                          metadata={"framework": "openai-agents"})
            except AlreadyExistsError:
                # Another run of this session (runs side by side, another process) made it since the look: its
                # owner is checked when the messages are saved, as for a thread made earlier.
                pass
        messages = [item_to_message(i, thread_id=self.session_id, resource_id=self.resource_id, tool_names=names,
                                    tool_args=args)
                    for i in items]
        if self._agent is not None:
            for message in messages:  # the agent that answered, as our own Agent's replies say
                if message.role == "assistant":
                    message.content.setdefault("metadata", {})["agent"] = self._agent
        # The run's record is written with its messages (once it has made a model call).
        writes = [TurnWrite(turn, self.memory, self.session_id, self.resource_id)] if turn is not None else []
        return self.memory.save_messages(messages, _writes=writes)

    def _continues(self, turn: SdkTurn, newest: Sequence[Message], items: Sequence[Mapping[str, Any]]) -> None:
        """A run that has made a model call but stores no user input (one resumed after a tool approval,
        ``Runner.run(agent, state)``) answers an earlier input: the last one before the tool call whose
        output it stores (an approval may come after newer inputs), else the thread's last. Its calls and
        replies go to that turn's record, after the calls recorded there (``SdkTurn.base``). Without that
        record (or with that input further back than ``newest``) its calls are not claimed for any turn."""
        if turn.user_id is not None or turn.base is not None or any(i.get("role") == "user" for i in items):
            return
        turn.answered.update(str(i.get("call_id")) for i in items if i.get("type") == "function_call_output")
        if not turn.calls:
            return  # the tool's output is saved before the call that reads it
        answered = turn.answered
        end = len(newest)
        if answered:
            end = next((k for k, m in enumerate(newest) if answered & set(call_names(messages_to_items([m])))), -1)
        last = next((m for m in reversed(newest[:end]) if m.role == "user"), None) if end >= 0 else None
        base = records.read(self.memory.store, last.id) if last is not None else None
        if base is not None and base.framework == FRAMEWORK and base.thread_id == self.session_id:
            turn.base = base

    def _pop_item(self) -> Any | None:
        messages = self._newest(1)
        if not messages:
            return None
        newest = messages[-1]
        items = messages_to_items([newest])
        self._delete([newest.id])
        return items[-1] if items else None

    def _clear(self) -> None:
        self._delete([m.id for m in self._messages()])

    def _delete(self, ids: list[str]) -> None:
        # Through the facade, as the Studio deletes: each kept as a version, and the recall index
        # (vectors, keyword docs, passages) follows, so a removed item is not recalled afterwards.
        if ids:
            self.memory.delete_messages(ids, resource_id=self.resource_id, author="openai-agents")

    def _memory_prompt(self, query: str) -> AssembledPrompt:
        """The memory processors run live for this thread, history off (the session supplies it).

        Recall fills its top k with other threads' messages: the thread's own messages are what the
        session sends (the input the SDK saved just before this call among them), and a same-thread
        hit would reach the model only as a repeat, since only the memory's system blocks are added.
        The search leaves the thread out by a filter (``recall_exclude_thread``): one search of top k
        whatever the thread's length, and no message of it is read or ranked."""
        mem = self.memory
        request = mem.request_context(thread_id=self.session_id, resource_id=self.resource_id,
                                      options={"last_messages": 0})
        if request.options.semantic_recall.enabled:
            request = replace(request, recall_exclude_thread=self.session_id)
        ctx = mem.new_context(request, services=replace(mem.services(), tracer=NOOP_TRACER))
        ctx.live = True  # observational memory may observe; working memory and recall read
        mem.prepare_input(ctx, input=[Message.user(query)] if query else [])
        return mem.run_input(ctx)


def memory_blocks(prompt: AssembledPrompt) -> list[str]:
    """The system texts the memory processors added to ``prompt`` (working memory, recall from other
    threads, observations), in prompt order."""
    return [f.text for f in prompt.fragments if f.role == "system" and f.source not in _NOT_MEMORY and f.text]


#: The SDK's sampling settings that have a name of ours (``core.llm.settings.ModelSettings``).
_SDK_SETTINGS = ("max_tokens", "temperature", "top_p", "frequency_penalty", "presence_penalty")


def _settings_of(agent: Any) -> dict[str, Any]:
    """The SDK agent's model settings that are set, by our names (what the playground sends)."""
    sdk = getattr(agent, "model_settings", None)
    out: dict[str, Any] = {}
    for name in _SDK_SETTINGS:
        value = getattr(sdk, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def _own_tools(agent: Any) -> list[str]:
    """The names of the SDK agent's own tools (the working-memory tool a session offers left out)."""
    names = [getattr(t, "name", None) for t in getattr(agent, "tools", None) or ()]
    return [n for n in names if isinstance(n, str) and n and n not in WM_TOOL_NAMES]


class _Arming:
    """A ``call_model_input_filter`` that keeps what each model call sends for the turn's record: the
    caller's own filter (run first), or none when the session adds no memory."""

    def __init__(self, session: MemorySession, inner: Any, model: Any = None) -> None:
        self.session = session
        self.inner = inner
        self.model = model  # the run config's model (a ``Model`` or a name), which the SDK uses first

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        if self.inner is not None:
            result = self.inner(data)
            out: ModelInputData = await result if asyncio.iscoroutine(result) else result
        else:
            out = data.model_data
        self.session._arm(data.agent, self.model, out.instructions if isinstance(out, ModelInputData) else None)
        return out


class _Watching(ModelProvider):
    """The run's model provider, with the request hook added to each model it gives (``capture.watch``)."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner

    def get_model(self, model_name: str | None) -> Model:
        model = self.inner.get_model(model_name)
        watch(model)
        resolved(model)
        return model

    async def aclose(self) -> None:
        await self.inner.aclose()
