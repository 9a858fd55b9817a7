"""One chat-playground turn, run on a worker thread: the agent the user picked, the model from
Preferences, the reply streamed out as it arrives. No Qt here (the pane turns callbacks into signals).

The turn is the engine's own ``Agent.stream``: the same processors, the same saving rules, the same
trace as any agent process, with each text delta handed to a callback as it arrives. Stop is the turn's
``CallStop`` (``core.llm.stopping``, made with ``hosted_too``): pressing it shuts the connection of the model call
in flight at once, whether the model is still thinking (no text yet), replying, or answering a delegation, so a
local one-slot server stops generating and is free for the next turn (llama.cpp first finishes reading a prompt it
has begun: the Studio no longer waits for that, the server still does); no later model call starts, and nothing of
the turn is saved. Only a Stop that comes once the turn's save has begun is too late: the turn is stored
(``TurnOutcome.stop_too_late``).

The agent is built from a registered configuration (``core.agent_configs``: its memory options, its
memory name, so Studio overrides apply, and its instructions when it recorded them) or is a plain
default agent. Its memory is passed as a factory, so the playground never re-registers the agent it
borrows. A model error saves nothing: the engine keeps a turn whose model call failed out of history
(and, with recall, out of the index).

The agent's model settings come from its newest recorded turn on the thread (``recorded_runs``: the
settings its first model call was sent with), else from its registration (``registered_run``: an
``Agent`` records its model settings and its tools' names; a row of an older engine holds neither,
and the model's defaults apply). Its own tools are code in its process, which the Studio cannot run: they are not offered (the
pane says so and names them); memory's own tools are. Every reply is capped (``max_tokens``): the
user's reply cap, which starts at the agent's recorded one, else ``DEFAULT_REPLY_CAP``; an uncapped
reply of a small local model can run to the server's context size, be stored, and overflow every
later turn of the thread.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from core import Agent, Memory, MemoryOptions, Message, Store
from core.agent_configs import DEFAULT_MEMORY_NAME, AgentConfig
from core.background import BackgroundWork
from core.llm.base import CONTEXT_OVERFLOW_HINT, ChatModel, ModelError
from core.llm.stopping import CallStop
from core.traces.tracer import Span, Tracer
from studio.logic.chat_layout import WAITING_FOR_MODEL, memory_problem

logger = logging.getLogger(__name__)

PLAYGROUND_AGENT = "studio-playground"  # the name a plain default agent answers under
DEFAULT_REPLY_CAP = 1024  # tokens: the reply cap when the agent recorded none (the user may change it)
MAX_REPLY_CAP = 131_072
RECORDS_READ = 8  # the newest turns of a thread looked up for each agent's recorded run
# In the metadata of every user message the playground sends: its turns are the playground's, not the agent's
# own, so they never stand for the agent's model settings or tools (``recorded_runs``).
SENT_FROM = {"createdBy": "memory-studio chat playground"}
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
    """The user stopped the reply; the turn is dropped like any failed model call. ``during``: what the turn was
    doing when stopped, where that was not its model's reply (observational memory's "observer", "reflector …")."""

    during: str | None = None
    waiting: bool = False  # the turn waited for ``during`` running in the background (it goes on)


class InputKept(Exception):
    """A turn that failed (or was stopped) after its message was stored: synchronous observational memory stores
    the message it observes, with that observation, before the model is asked (as Mastra does), and keeps both;
    a retry of the same message in that thread is taken as the stored one. ``error``: what ended the turn."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


#: What a failure says of what was saved when the turn's message was stored all the same (``InputKept``).
KEPT = ("Your message was stored all the same, with the observation observational memory made of it before the "
        "model was asked; nothing of the reply was saved. Send it again in this thread to retry: it is not stored "
        "or observed twice.")
NOTHING = "Nothing of this turn was saved."


def turn_stop() -> CallStop:
    """The stop of one playground turn: a person waits, so a hosted API's call is cut at once too."""
    return CallStop(hosted_too=True)


#: What a stopped turn's model call is told (``CallStopped``'s reason; spans and logs show it).
STOP_REASON = "the user pressed Stop in the Studio's chat"


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
    max_tokens: int | None = DEFAULT_REPLY_CAP  # the reply cap
    model_settings: Mapping[str, Any] = field(default_factory=dict)  # the agent's own (``AgentRun``), cap aside


@dataclass(frozen=True)
class AgentRun:
    """What an agent's newest recorded turn on a thread ran with: its first model call's settings and
    the tools of its own it offered (memory's tools left out)."""

    settings: Mapping[str, Any]  # ``ModelSettings`` keys as sent (max_tokens too, when it had one)
    tools: tuple[str, ...]
    input_id: str  # the user message that started that turn ("" for a registration)
    registered: bool = False  # from the agent's registration (no recorded turn of it on the thread)

    @property
    def max_tokens(self) -> int | None:
        cap = self.settings.get("max_tokens")
        return cap if isinstance(cap, int) and cap > 0 else None

    def sampling(self) -> dict[str, Any]:
        """The settings the playground sends as the agent's, the reply cap aside (the pane's control)."""
        return {k: v for k, v in self.settings.items() if k != "max_tokens"}


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
    finish_reason: str = "stop"  # "length": the reply stopped at the cap
    stop_too_late: bool = False  # Stop was pressed once the turn's save had begun: the turn is stored
    memory_problem: str = ""  # observational memory's observer or reflector failing, as noted (``memory_problem``)


def recorded_runs(store: Store, rows: Sequence[Any]) -> dict[str, AgentRun]:
    """Agent name → its newest recorded turn among ``rows`` (a thread's messages, oldest first; see
    ``AgentRun``), the playground's own turns left out. An agent whose replies name it (``metadata.agent``)
    but whose turns recorded no model call (older records) is left out: its settings are not known."""
    from dataclasses import fields as dataclass_fields

    from core.llm.settings import ModelSettings
    from core.replay import store as records
    from core.working_memory import STATE_TOOL_NAME, TOOL_NAME

    known = {f.name for f in dataclass_fields(ModelSettings)}
    memory_tools = {TOOL_NAME, STATE_TOOL_NAME}
    runs: dict[str, AgentRun] = {}
    done: set[str] = set()
    answering: str | None = None  # the agent whose reply was seen (newest first) until its turn's input
    reads = 0
    for row in reversed(rows):
        msg = row.message
        if msg is None:
            continue
        if row.role == "assistant":
            name = msg.metadata.get("agent") if isinstance(msg.metadata, Mapping) else None
            answering = str(name) if name and str(name) not in done else None
            continue
        if row.role != "user" or answering is None:
            continue
        name, answering = answering, None
        if isinstance(msg.metadata, Mapping) and msg.metadata.get("createdBy") == SENT_FROM["createdBy"]:
            continue  # a turn this playground ran: what it sent, not what the agent runs with
        if reads >= RECORDS_READ:
            break
        reads += 1
        record = records.read(store, row.id)
        if record is None or not record.calls:
            continue
        first = record.calls[0]
        done.add(name)
        runs[name] = AgentRun({k: v for k, v in first.settings.items() if k in known},
                              tuple(t for t in record.tools if t not in memory_tools), row.id)
    return runs


def registered_run(agent: AgentConfig | None) -> AgentRun | None:
    """The model settings and tools agent ``agent`` registered, as the run the playground sends with when no
    recorded turn of it on the thread says more; None when its registration holds neither (an older engine)."""
    if agent is None:
        return None
    from dataclasses import fields as dataclass_fields

    from core.llm.settings import ModelSettings, ModelSettingsError

    settings, tools = agent.model_settings, agent.tool_names
    if settings is None and tools is None:
        return None
    known = {f.name for f in dataclass_fields(ModelSettings)}
    kept = {k: v for k, v in (settings or {}).items() if k in known}
    try:
        ModelSettings.parse(kept)
    except (ModelSettingsError, TypeError, ValueError):  # a hand-edited row: the model's defaults, said so
        logger.warning("agent %r registered model settings that cannot be used; ignored", agent.name)
        kept = {}
    return AgentRun(kept, tuple(tools or ()), "", registered=True)


def settings_summary(run: AgentRun | None, agent: AgentConfig | None, chosen: Mapping[str, Any] | None = None) -> str:
    """One line for the pane: which model settings the turn is sent with, and where they come from
    (``chosen``: the sampling settings set in the pane, sent over the agent's own)."""
    line = _agent_settings(run, agent)
    if chosen:
        line += " Sent instead, as set here: " + ", ".join(f"{k} {_setting_text(v)}" for k, v in chosen.items()) + "."
    return line


def _agent_settings(run: AgentRun | None, agent: AgentConfig | None) -> str:
    if agent is None:
        return "Model settings: the model's defaults (a plain default agent), with the reply cap."
    if run is None:
        return (f"Model settings: the model's defaults. Agent '{agent.name}' did not register its settings, and "
                "no recorded turn of it on the selected thread holds them; the reply cap applies.")
    shown = ", ".join(f"{k} {_setting_text(v)}" for k, v in run.sampling().items())
    if run.registered and not shown:
        return (f"Model settings: the model's defaults (agent '{agent.name}' registered none, and no recorded "
                "turn of it on the selected thread holds any); the reply cap applies.")
    if run.registered:
        return (f"Model settings: {shown} (as agent '{agent.name}' registered them; no recorded turn of it on "
                "the selected thread).")
    return (f"Model settings: {shown or 'none beyond the reply cap'} (as sent in the newest turn agent "
            f"'{agent.name}' recorded on this thread).")


def tools_summary(run: AgentRun | None, agent: AgentConfig | None) -> str:
    """One line for the pane: the agent's own tools are not offered here (the Studio cannot run them)."""
    if agent is None:
        return "Tools: memory's own only (updateWorkingMemory when working memory is on)."
    where = "as it registered them" if run is not None and run.registered else "offered in the turn it recorded"
    own = f" ({', '.join(run.tools)}, {where})" if run is not None and run.tools else ""
    return (f"Tools: the tools of agent '{agent.name}' itself{own} are not offered here: they are code in the "
            "agent's process, which the Studio cannot run, so its replies may differ where it would call one. "
            "Memory's own tools are offered.")


def _setting_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return str(value.get("type", "…"))
    return str(value)


def agent_instructions(agent: AgentConfig | None) -> str:
    """The instructions an agent recorded when it registered, or the default agent's."""
    if agent is not None:
        return agent.instructions or ""
    return DEFAULT_INSTRUCTIONS


def memory_for(store: Store, agent: AgentConfig | None, model: ChatModel, embedder: Callable[[], Any]) -> Memory:
    """The memory the agent runs with: its registered options (Studio overrides apply by memory name).
    Built per turn, it shares its background work with the same memory's earlier turns (``shared_background``)."""
    opts = agent.memory_options() if agent is not None else MemoryOptions()
    needs_embedder = opts.semantic_recall.enabled
    om = opts.observational_memory.enabled
    name = agent.memory_name if agent is not None else DEFAULT_MEMORY_NAME
    return Memory(store, opts, name=name, embedder=embedder() if needs_embedder else None,
                  observer_model=model if om else None, reflector_model=model if om else None,
                  background=shared_background(store, name))


_BACKGROUNDS: "weakref.WeakKeyDictionary[Store, dict[str, BackgroundWork]]" = weakref.WeakKeyDictionary()
_BACKGROUNDS_LOCK = threading.Lock()


def shared_background(store: Store, memory_name: str) -> BackgroundWork:
    """One memory's background work in this store, kept across Studio Chat's turns: a turn past ``block_after``
    waits for (and its Stop wakes from) the background observer an earlier turn started, as in the agent's own
    process, rather than race it with an observer of its own. ``Store.close()`` finishes it."""
    with _BACKGROUNDS_LOCK:
        works = _BACKGROUNDS.setdefault(store, {})
        work = works.get(memory_name)
        if work is None or work.closed:
            work = works[memory_name] = BackgroundWork(memory_name)
        return work


def close_when_idle(store: Store, agent: AgentConfig | None, model: ChatModel) -> None:
    """Close a turn's model once its memory's background work, which may still call it (the observer the turn
    started), is done: closed at the turn's end, that observer failed ("the client has been closed") and backed
    off. Never blocks: a thread closes it later."""
    close = getattr(model, "close", None)
    if not callable(close):
        return
    background = shared_background(store, agent.memory_name if agent is not None else DEFAULT_MEMORY_NAME)
    if background.wait_idle(0):
        close()
        return

    def later() -> None:
        background.wait_idle(None)  # (Store.close() finishes or cancels the work: this ends then too)
        close()

    threading.Thread(target=later, name="close chat model when memory is idle", daemon=True).start()


def run_turn(
    store: Store,
    request: ChatRequest,
    model: ChatModel,
    *,
    embedder: Callable[[], Any],
    on_delta: Callable[[str], None],
    on_tools: Callable[[list[str]], None] | None = None,
    stop: CallStop | None = None,
    on_waiting: Callable[[str], None] | None = None,
) -> TurnOutcome:
    """Run one turn (call on a worker). Raises ``ModelError`` (nothing saved) when the model fails, and
    ``TurnStopped`` (nothing saved) once ``stop`` was stopped (``turn_stop``; from any thread).
    ``on_waiting``: told what the turn waits for whenever that changes before its reply (``waiting_for``)."""
    started = time.perf_counter()
    tools_seen: list[str] = []

    def tools(names: list[str]) -> None:
        tools_seen.extend(names)
        if on_tools is not None:
            on_tools(names)

    mem = memory_for(store, request.agent, model, embedder)
    name = request.agent.name if request.agent is not None else PLAYGROUND_AGENT
    # Borrowing a registered agent never registers it again (its record is the agent process's).
    # The agent's own model settings (from its recorded turn), and the user's reply cap over them.
    tracer = mem.turn_tracer()
    if on_waiting is not None and isinstance(tracer, Tracer):
        tracer = tracer.telling(_teller(on_waiting))
    agent = Agent(name, instructions=request.instructions, model=model, memory=lambda _values: mem, register=False,
                  model_settings=dict(request.model_settings), tracer=tracer)
    message = Message.user(request.text, id=request.input_id, thread_id=request.thread_id,
                           resource_id=request.resource_id, metadata=SENT_FROM)
    deltas = 0
    result = None
    cap = {"max_tokens": request.max_tokens} if request.max_tokens else None
    try:
        with agent.stream(message, memory={"resource": request.resource_id, "thread": request.thread_id},
                          model_settings=cap, stop=stop) as stream:
            for event in stream:
                if stop is not None and stop.stopped and event.kind != "finish":
                    # A model that cannot be cut short (scripted): leaving the ``with`` closes the stream, which
                    # abandons the turn. (``finish`` comes once the turn is saved: too late to drop it.)
                    raise _stopped(model)
                if event.kind == "text-delta" and event.text:
                    deltas += 1
                    on_delta(event.text)
                elif event.kind == "tool-call" and event.tool_name:
                    tools([event.tool_name])
                elif event.kind == "finish":
                    result = event.result
    except Exception as exc:
        failure: BaseException = exc
        if isinstance(exc, ModelError) and stop is not None and stop.stopped and not isinstance(exc, TurnStopped):
            # The call its Stop cut short (CallStopped, or a delegation's), or the observer it ran first.
            failure = _stopped(model, getattr(exc, "during", None), waiting=getattr(exc, "waiting", False))
        if _input_stored(mem, request):
            if request.new_thread:
                try:
                    _name_new_thread(mem, request)
                except Exception:  # (the turn's own error is the one to report)
                    logger.warning("naming thread %s failed", request.thread_id, exc_info=True)
            raise InputKept(failure) from exc
        if failure is exc:
            raise
        raise failure from exc
    assert result is not None  # a stream that ends without ``finish`` raised the turn's error
    if request.new_thread:
        _name_new_thread(mem, request)
    usage = result.usage
    return TurnOutcome(request, result.text, model.model_id, deltas, [m.id for m in result.saved],
                       result.trace_id, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
                       time.perf_counter() - started, tools_seen, result.finish_reason or "stop",
                       stop_too_late=stop is not None and stop.stopped,
                       memory_problem=memory_problem(p.notes for p in result.prompts))


def waiting_for(span_type: str, attributes: Mapping[str, Any]) -> str | None:
    """What a turn waits for, said for the transcript, once a span of ``span_type`` with ``attributes`` starts in
    it: observational memory observing (or reflecting) before the model is asked, or the turn waiting for its
    background observer (or reflector) past block_after, then the model
    (``WAITING_FOR_MODEL``); None: no change (tools, reads)."""
    operation = attributes.get("operationType")
    if span_type == "memory_operation" and operation == "observe":
        count = attributes.get("messages")
        tokens = attributes.get("tokens")
        what = (f"{count:,} unobserved message{'' if count == 1 else 's'}" if isinstance(count, int)
                else "the unobserved messages")
        size = f" ({tokens:,} tokens)" if isinstance(tokens, int) else ""
        batch, batches = attributes.get("batch"), attributes.get("batches")
        if isinstance(batch, int) and isinstance(batches, int) and batches > 1:  # a backlog over max_tokens_per_batch
            # With the observer's window known the count is a forecast: how much a call can take depends on what the
            # calls before it store (``OMJob.calls_left``), so it may move by a call or two as they go.
            about = "about " if attributes.get("batchesForecast") and batch < batches else ""
            return (f"observational memory is observing {what}{size} before the reply: batch {batch} of {about}"
                    f"{batches}, each a model call of its own")
        return f"observational memory is observing {what}{size} before the reply, a model call of its own"
    if span_type == "memory_operation" and operation == "reflect":
        tokens = attributes.get("tokens")
        size = f" ({tokens:,} tokens)" if isinstance(tokens, int) else ""
        return f"observational memory is condensing its observations{size} before the reply, a model call of its own"
    if span_type == "memory_operation" and operation == "wait":  # past block_after: what runs in the background
        role = "reflector" if attributes.get("waitsFor") == "reflector" else "observer"
        limit = attributes.get("limitSeconds")
        most = f", at most {limit:.0f} s" if isinstance(limit, (int, float)) else ""
        return (f"waiting for observational memory's background {role} to finish (past its block_after the "
                f"reply waits for it{most})")
    if span_type == "model_generation" and "role" not in attributes:  # the agent's own call (memory's have a role)
        return WAITING_FOR_MODEL
    return None


def _teller(on_waiting: Callable[[str], None]) -> Callable[[Span], None]:
    """A span listener telling ``on_waiting`` what the turn waits for; spans other threads start (memory's
    background observer, another turn) are not this turn's."""
    turn_thread = threading.get_ident()

    def started(span: Span) -> None:
        if threading.get_ident() != turn_thread:
            return
        said = waiting_for(str(span.field("span_type")), span.field("attributes") or {})
        if said is not None:
            on_waiting(said)

    return started


def _stopped(model: ChatModel, during: str | None = None, *, waiting: bool = False) -> TurnStopped:
    what = ("stopped while waiting for observational memory's background " if waiting else
            "stopped while observational memory's ") + f"{during}" + ("" if waiting else " was running")
    said = TurnStopped(what if during else "stopped before the reply was complete", model_id=model.model_id,
                       hint="nothing of this turn was saved; send the message again to retry")
    said.during, said.waiting = during, waiting
    return said


def _input_stored(mem: Memory, request: ChatRequest) -> bool:
    """Whether the failed turn's message is stored (``InputKept``); a read that fails says no (as before)."""
    try:
        return bool(mem.store.memory.get_messages([request.input_id]))
    except Exception:  # (the turn's own error is the one to report)
        logger.warning("reading whether the failed turn's message %s was stored failed", request.input_id,
                       exc_info=True)
        return False


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
    """(what happened, what to do) for an error of a chat turn, in the user's words; an ``InputKept`` says that
    the message was stored all the same (``KEPT``)."""
    kept = isinstance(exc, InputKept)
    if isinstance(exc, InputKept):
        exc = exc.error
    saved = KEPT if kept else NOTHING
    retry = "" if kept else " Send the message again to retry."
    if isinstance(exc, TurnStopped):
        if exc.during and exc.waiting:
            # Past block_after the turn waited for the background observer (or reflector), which goes on.
            return (f"You stopped the turn while it waited for observational memory's background {exc.during}.",
                    f"{saved} The background {exc.during} goes on; what it writes is used by the next turn.{retry}")
        if exc.during:
            # Observational memory observed (or reflected) in the turn, before its model was asked.
            return (f"You stopped the turn while observational memory's {exc.during} was running.",
                    KEPT if kept else "Nothing of this turn was saved, and no observation was written: the messages "
                    "stay unobserved and are observed again at the next turn. Send the message again to retry.")
        return "You stopped the reply.", f"{saved}{retry}"
    if isinstance(exc, ModelError):
        where = f" at {exc.endpoint}" if exc.endpoint else ""
        status = exc.status
        if status in (401, 403):
            todo = "Check the API key for this model (File > Preferences…): where it comes from and that it is set."
        elif status == 404:
            todo = "Check the base URL and the model name in File > Preferences… (the server does not know them)."
        elif exc.hint.startswith(CONTEXT_OVERFLOW_HINT):
            # Sending it again fails the same way (the playground sets no context window of its own).
            todo = ("The message and the memory sent with it are longer than the model's context: shorten the "
                    "message, start a new thread (less history), or pick a model with a larger context. "
                    "The prompt inspector shows what this thread's memory adds.")
        elif status is None and exc.endpoint and exc.hint:
            # The model's own hint says what it saw (refused, no answer in time, taken and then dropped): it
            # leads, said once, not after a guess that the server is down ("running and reachable" read first
            # for a server that took the request and dropped it).
            todo = (f"{exc.hint[:1].upper()}{exc.hint[1:]}; or pick another model. "
                    "Test Connection in File > Preferences… tries the server.")
            return f"The model {exc.model_id} failed{where}: {exc.without_hint}", f"{todo} {saved}"
        elif status is None and exc.endpoint:
            todo = (f"Check that the server{where} is running and reachable, or pick another model; "
                    "Test Connection in File > Preferences… tries it.")
        else:
            todo = "Try again, or pick another model in the Model list (File > Preferences… configures them)."
        return f"The model {exc.model_id} failed{where}: {exc}", f"{todo} {saved}"
    return f"{type(exc).__name__}: {exc}", f"{saved}{'' if kept else ' Fix the cause above and send again.'}"


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
