"""One chat-playground turn, run on a worker thread: the agent the user picked, the model from
Preferences, the reply streamed out as it arrives. No Qt here (the pane turns callbacks into signals).

The turn is the engine's own ``Agent.stream``: the same processors, the same saving rules, the same
trace as any agent process, with each text delta handed to a callback as it arrives. Stopping closes
the stream, which abandons the turn: nothing of it is saved.

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
from typing import Any, Callable, Mapping, Protocol, Sequence

from core import Agent, Memory, MemoryOptions, Message, Store
from core.agent_configs import DEFAULT_MEMORY_NAME, AgentConfig
from core.llm.base import CONTEXT_OVERFLOW_HINT, ChatModel, ModelError

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


def configured_models(widget: Any) -> list[ModelOption]:
    """The models Preferences offers (the offline scripted one first)."""
    from studio.preferences import preferences_for

    return list(preferences_for(widget).models())


def default_model_name(widget: Any) -> str:
    """The model Preferences names as the default (the offline scripted one when none is set)."""
    from studio.preferences import preferences_for

    return preferences_for(widget).default_model().name


class TurnStopped(ModelError):
    """The user stopped the reply; the turn is dropped like any failed model call."""


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

    mem = memory_for(store, request.agent, model, embedder)
    name = request.agent.name if request.agent is not None else PLAYGROUND_AGENT
    # Borrowing a registered agent never registers it again (its record is the agent process's).
    agent = Agent(name, instructions=request.instructions, model=model, memory=lambda _values: mem, register=False)
    message = Message.user(request.text, id=request.input_id, thread_id=request.thread_id,
                           resource_id=request.resource_id)
    deltas = 0
    result = None
    with agent.stream(message, memory={"resource": request.resource_id, "thread": request.thread_id}) as stream:
        for event in stream:
            if stop is not None and stop.is_set():
                # Leaving the ``with`` closes the stream: the turn is abandoned and nothing is saved.
                raise TurnStopped("stopped before the reply was complete", model_id=model.model_id,
                                  hint="nothing of this turn was saved; send the message again to retry")
            if event.kind == "text-delta" and event.text:
                deltas += 1
                on_delta(event.text)
            elif event.kind == "tool-call" and event.tool_name:
                tools([event.tool_name])
            elif event.kind == "finish":
                result = event.result
    assert result is not None  # a stream that ends without ``finish`` raised the turn's error
    if request.new_thread:
        _name_new_thread(mem, request)
    usage = result.usage
    return TurnOutcome(request, result.text, model.model_id, deltas, [m.id for m in result.saved],
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
        elif exc.hint.startswith(CONTEXT_OVERFLOW_HINT):
            # Sending it again fails the same way; the playground sets no context window or max_tokens.
            todo = ("The message and the memory sent with it are longer than the model's context: shorten the "
                    "message, start a new thread (less history), or pick a model with a larger context. "
                    "The prompt inspector shows what this thread's memory adds.")
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
