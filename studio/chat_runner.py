"""One chat-playground turn, run on a worker thread: the agent the user picked, the model from
Preferences, the reply streamed out as it arrives. No Qt here (the pane turns callbacks into signals).

The turn is the engine's own ``Agent.generate``: the same processors, the same saving rules, the same
trace as any agent process. Streaming comes from ``StreamingModel``, which answers the agent's
``generate`` by consuming the chosen model's ``stream`` and handing each text delta to a callback.
(Replace it with ``Agent.stream`` once the engine has one.)

The agent is built from a registered configuration (``core.agent_configs``: its memory options, its
memory name, so Studio overrides apply, and its instructions when it recorded them) or is a plain
default agent. Its memory is passed as a factory, so the playground never re-registers the agent it
borrows. A model error saves nothing: the engine keeps a turn whose model call failed out of history
(and, with recall, out of the index).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from core import Agent, Memory, MemoryOptions, Message, Store
from core.agent_configs import DEFAULT_MEMORY_NAME, AgentConfig
from core.llm.base import ChatChunk, ChatModel, ChatResult, ModelError
from core.llm.scripted import ScriptedModel, estimate_tokens

logger = logging.getLogger(__name__)

PLAYGROUND_AGENT = "studio-playground"  # the name a plain default agent answers under
DEFAULT_INSTRUCTIONS = "You are a helpful assistant."
TITLE_CHARS = 60


class ModelOption(Protocol):
    """An entry of the model picker (``studio.preferences.ModelChoice`` has this shape)."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    def build(self) -> ChatModel: ...


def offline_reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The offline model's answer: deterministic, and plainly not from a language model."""
    last_user = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    quoted = last_user if len(last_user) <= 160 else last_user[:160] + "…"
    size = sum(estimate_tokens(str(m.get("content") or "")) for m in messages)
    return (f"Offline scripted reply (no language model was called). The prompt had {len(messages)} "
            f"message(s), about {size:,} tokens" + (f" and {len(tools)} tool(s)" if tools else "")
            + (f"; the last user message was: “{quoted}”" if quoted else "") + ".")


@dataclass(frozen=True)
class OfflineChoice:
    """The offline scripted model, for a Studio without model Preferences."""

    name: str = "Scripted (offline)"

    @property
    def label(self) -> str:
        return f"{self.name} — no language model"

    def build(self) -> ChatModel:
        return ScriptedModel(offline_reply, name="offline")


def configured_models(widget: Any) -> list[ModelOption]:
    """The models Preferences offers (the offline scripted one first)."""
    try:
        from studio.preferences import preferences_for
    except ImportError:  # a Studio without the Preferences module: the offline model still works
        return [OfflineChoice()]
    return list(preferences_for(widget).models())


class TurnStopped(ModelError):
    """The user stopped the reply; the turn is dropped like any failed model call."""


class StreamingModel:
    """A ``ChatModel`` whose ``generate`` streams the wrapped model and reports each text delta.

    ``on_delta(text)`` runs on the worker thread for every piece as it arrives; ``on_tools(names)``
    after a model call that asked for tools; ``stopped()`` is checked between pieces.
    """

    def __init__(self, inner: ChatModel, on_delta: Callable[[str], None],
                 on_tools: Callable[[list[str]], None] | None = None,
                 stopped: Callable[[], bool] | None = None) -> None:
        self.inner = inner
        self.on_delta = on_delta
        self.on_tools = on_tools
        self.stopped = stopped or (lambda: False)
        self.deltas = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def provider(self) -> str:
        return self.inner.provider

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def generate(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 temperature: float | None = None, max_tokens: int | None = None,
                 timeout: float | None = None) -> ChatResult:
        result: ChatResult | None = None
        for chunk in self.inner.stream(messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                                       timeout=timeout):
            if self.stopped():
                raise TurnStopped("stopped before the reply was complete", model_id=self.model_id,
                                  hint="nothing of this turn was saved; send the message again to retry")
            if chunk.text_delta:
                self.deltas += 1
                self.on_delta(chunk.text_delta)
            if chunk.result is not None:
                result = chunk.result
        if result is None:
            raise ModelError("the reply stream ended without its final chunk", model_id=self.model_id,
                             hint="the server closed the connection early; send the message again")
        if result.tool_calls and self.on_tools is not None:
            self.on_tools([c.name for c in result.tool_calls])
        return result

    def stream(self, messages: list[dict[str, Any]], **kw: Any) -> Iterator[ChatChunk]:
        return self.inner.stream(messages, **kw)


@dataclass(frozen=True)
class ChatRequest:
    """One message the user sends: where to, as which agent."""

    thread_id: str
    resource_id: str
    text: str
    agent: AgentConfig | None  # None: a plain default agent
    instructions: str
    input_id: str  # the user message's id, known before the turn so its prompt link can be shown
    new_thread: bool = False


@dataclass
class TurnOutcome:
    request: ChatRequest
    text: str
    model_id: str
    deltas: int  # how many pieces the reply arrived in
    saved_ids: list[str] = field(default_factory=list)
    trace_id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    tools: list[str] = field(default_factory=list)


def agent_instructions(agent: AgentConfig | None) -> str:
    """The instructions an agent recorded when it registered, or the default agent's."""
    if agent is not None:
        return agent.instructions or ""
    return DEFAULT_INSTRUCTIONS


def memory_for(store: Store, agent: AgentConfig | None, model: ChatModel, embedder: Callable[[], Any]) -> Memory:
    """The memory the agent runs with: its registered options (Studio overrides apply by memory name)."""
    opts = agent.memory_options() if agent is not None else MemoryOptions()
    needs_embedder = opts.semantic_recall.enabled
    om = opts.observational_memory.enabled
    return Memory(store, opts, name=agent.memory_name if agent is not None else DEFAULT_MEMORY_NAME,
                  embedder=embedder() if needs_embedder else None,
                  observer_model=model if om else None, reflector_model=model if om else None)


def run_turn(
    store: Store,
    request: ChatRequest,
    model: ChatModel,
    *,
    embedder: Callable[[], Any],
    on_delta: Callable[[str], None],
    on_tools: Callable[[list[str]], None] | None = None,
    stop: threading.Event | None = None,
) -> TurnOutcome:
    """Run one turn (call on a worker). Raises ``ModelError`` (nothing saved) when the model fails."""
    started = time.perf_counter()
    tools_seen: list[str] = []

    def tools(names: list[str]) -> None:
        tools_seen.extend(names)
        if on_tools is not None:
            on_tools(names)

    streaming = StreamingModel(model, on_delta, tools, stop.is_set if stop is not None else None)
    mem = memory_for(store, request.agent, model, embedder)  # an observer's call is not part of the reply
    name = request.agent.name if request.agent is not None else PLAYGROUND_AGENT
    agent = Agent(name, instructions=request.instructions, model=streaming,  # type: ignore[arg-type]
                  memory=lambda _values: mem)
    message = Message.user(request.text, id=request.input_id, thread_id=request.thread_id,
                           resource_id=request.resource_id)
    result = agent.generate(message, memory={"resource": request.resource_id, "thread": request.thread_id})
    if request.new_thread:
        _name_new_thread(mem, request)
    usage = result.usage
    return TurnOutcome(request, result.text, model.model_id, streaming.deltas, [m.id for m in result.saved],
                       result.trace_id, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
                       time.perf_counter() - started, tools_seen)


def _name_new_thread(mem: Memory, request: ChatRequest) -> None:
    """A thread the playground started gets its first words as a title (only after the turn was saved)."""
    thread = mem.get_thread(request.thread_id)
    if thread is None or thread.title:
        return
    words = " ".join(request.text.split())
    title = words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1] + "…"
    try:
        mem.update_thread(request.thread_id, title=title, metadata={"createdBy": "memory-studio chat playground"})
    except Exception:  # noqa: BLE001 - a missing title never undoes a saved turn
        logger.warning("could not name the new thread %s", request.thread_id, exc_info=True)


def model_problem(exc: BaseException) -> tuple[str, str]:
    """(what happened, what to do) for an error of a chat turn, in the user's words."""
    if isinstance(exc, TurnStopped):
        return "You stopped the reply.", "Nothing of this turn was saved. Send the message again to retry."
    if isinstance(exc, ModelError):
        where = f" at {exc.endpoint}" if exc.endpoint else ""
        status = exc.status
        if status in (401, 403):
            todo = "Check the API key for this model (File > Preferences…): where it comes from and that it is set."
        elif status == 404:
            todo = "Check the base URL and the model name in File > Preferences… (the server does not know them)."
        elif status is None and exc.endpoint:
            todo = (f"Check that the server{where} is running and reachable, or pick another model; "
                    "Test Connection in File > Preferences… tries it.")
        else:
            todo = "Try again, or pick another model in the Model list (File > Preferences… configures them)."
        return f"The model {exc.model_id} failed{where}: {exc}", f"{todo} Nothing of this turn was saved."
    return f"{type(exc).__name__}: {exc}", "Nothing of this turn was saved. Fix the cause above and send again."


def recent_turn_links(rows: Sequence[Any]) -> Mapping[str, str]:
    """Message id → the user message that started its turn (for "prompt" links in the transcript)."""
    out: dict[str, str] = {}
    current: str | None = None
    for r in rows:
        if r.role == "user":
            current = r.id
        if current is not None:
            out[r.id] = current
    return out
