"""The Replay pane's worker jobs (no Qt import): open a thread, rebuild a step, what-if (under other options,
or with the memory as it is now), fork, re-run, and find a turn's trace.

A ``ReplayThread`` is one thread opened in Replay: the ``Memory`` its agent runs with (chosen by
``core.agent_configs.agent_for_thread``, the rule the inspector and the CLI use), its turns, the engine's
cache of the thread's stored rows (``core.replay.frozen.ReplaySource``, read once when the thread opens),
and a small cache of rebuilt prompts so stepping forward rebuilds only the new turn. Every method runs on a worker
thread and only reads, except ``fork`` (an explicit, confirmed action) and ``rerun`` (which calls a
model and writes nothing).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence

from core import AssembledPrompt, Memory, MemoryOptions, ModelNotInstalledError, Store
from core.agent_configs import agent_for_thread
from core.messages import Message
from core.replay import KEEP, FragmentChange, RerunResult, TurnRecord, messages_hash, prompt_diff, rerun
from core.replay.frozen import ReplaySource
from core.replay.rebuild import rebuild
from core.replay.turns import Turn
from core.storage.memory_store import Thread
from core.traces.spans import TraceFilters
from core.working_memory import WorkingMemoryService
from studio.logic.dates import format_datetime
from studio.logic.replay_layout import input_ids, turn_index_for, with_left_input_ids
from studio.logic.request_layout import RequestView, call_view
from studio.logic.short_ids import short_id

if TYPE_CHECKING:  # pragma: no cover
    from studio.preferences import ModelChoice

logger = logging.getLogger(__name__)

MemoryFactory = Callable[[Any, str], Memory]  # (MemoryOptions, memory name) -> Memory
CACHE_SIZE = 64


@dataclass
class StepData:
    """Everything the pane shows for one turn, and for each of its model calls."""

    index: int
    turn: Turn
    received: AssembledPrompt  # rebuild="record": exactly what the model received, or reconstructed
    now: AssembledPrompt  # rebuild="now": what the engine and today's configuration rebuild
    changes: list[FragmentChange]  # since the previous turn's prompt (empty for the first turn)
    now_changes: list[FragmentChange]  # received -> rebuilt now
    reply: list[Message]
    wm_label: str
    om_label: str
    previous_index: int | None = None
    requests: list[RequestView] = field(default_factory=list)  # per model call: what it sent
    call_changes: list[list[FragmentChange]] = field(default_factory=list)  # per call: since the call before
    recall_model_now: str | None = None  # the model of the recall index a search would use today (None: none)

    @property
    def calls(self) -> list[AssembledPrompt]:
        """The prompt of each model call of the turn, as received (one for a turn without tool calls)."""
        info = self.received.replay
        return [c.prompt for c in info.calls] if info is not None and info.calls else [self.received]

    def now_call(self, index: int) -> AssembledPrompt | None:
        """Call ``index`` rebuilt now (None when the engine now makes fewer calls)."""
        info = self.now.replay
        calls = [c.prompt for c in info.calls] if info is not None and info.calls else [self.now]
        return calls[index] if 0 <= index < len(calls) else None


Against = Literal["options", "today"]  # what a what-if compares each turn with: other options, or today's memory


@dataclass
class WhatIfOutcome:
    rows: list[Any]  # core.replay.WhatIfRow
    total: int
    cancelled: bool
    against: Against = "options"


@dataclass
class WhatIfDetail:
    """One turn's prompt as its model received it (``real``) beside its what-if: under other options, or
    (``against="today"``) rebuilt with the memory as it is now (``rebuild="today"``), a reconstruction."""

    index: int
    real: AssembledPrompt
    what_if: AssembledPrompt
    changes: list[FragmentChange] = field(default_factory=list)
    against: Against = "options"


def edits_mark(store: Store) -> tuple[str | None, str | None]:
    """When a stored message and an observation were last edited (``core.edits``): a thread read
    before that shows stale rows."""
    from core.edits import messages, observations

    return messages.newest_change(store), observations.newest_change(store)


def _replay_memory(memory_factory: MemoryFactory, options: MemoryOptions, name: str) -> tuple[Memory, str]:
    """The memory a thread replays with, and a note when it has to leave semantic recall out. A recorded
    turn rebuilds from its record (its recall hits included) and needs no embedding model; only "rebuilt
    now" and what-ifs search again. So a missing model costs those their recall, not the whole replay."""
    try:
        return memory_factory(options, name), ""
    except ModelNotInstalledError as exc:
        logger.warning("replaying without semantic recall: %s", exc)
        return memory_factory(options.merged({"semantic_recall": False}), name), (
            f"{exc} Until then, every turn replays as its record holds it; \"rebuilt now\", What-If and Re-Run "
            "leave semantic recall out.")


class ReplayThread:
    def __init__(self, store: Store, memory: Memory, thread: Thread, turns: list[Turn], agent: str,
                 start: int = 0, rows: ReplaySource | None = None, recall_note: str = "",
                 agent_name: str = "") -> None:
        self.store = store
        self.recall_note = recall_note  # why "rebuilt now" leaves semantic recall out ("" when it does not)
        self.rows = rows or ReplaySource(store).preload(thread.id)
        self.memory = memory
        self.thread = thread
        self.turns = turns
        self.agent = agent  # how the configuration was chosen, in words
        self.agent_name = agent_name or agent  # whose it is, without the how ("agent 'chef'"): the pane's header
        self.start = start  # the step to show first
        wm = memory.effective_options().working_memory  # reads the Studio's overrides: done here, on the worker
        self.thread_scoped_wm = bool(wm.enabled and wm.scope == "thread")  # what a fork can carry
        self._cache: OrderedDict[tuple[str, str], AssembledPrompt] = OrderedDict()
        self._lock = threading.Lock()
        self._rebuilding = threading.Lock()  # the rows cache is shared: one rebuild at a time
        self._versions: dict[tuple[str, str], list[Any]] = {}
        self.edits_mark = edits_mark(store)  # a message or observation edited since means: read again

    @property
    def thread_id(self) -> str:
        return self.thread.id

    def same_turns(self, other: "ReplayThread") -> bool:
        """Whether ``other`` (read again after a change on disk) holds the same turns and records."""
        return [(t.input_message_id, t.response_ids, t.record is not None) for t in self.turns] == \
            [(t.input_message_id, t.response_ids, t.record is not None) for t in other.turns] and \
            self.edits_mark == other.edits_mark

    # -- opening -----------------------------------------------------------------------------------
    @classmethod
    def open(cls, store: Store, memory_factory: MemoryFactory, thread_id: str,
             message_id: str | None = None) -> "ReplayThread":
        choice = agent_for_thread(store, thread_id)
        if choice.thread is None:
            raise LookupError(f"Thread {thread_id} is not in this database any more.")
        name = f"agent '{choice.agent.name}'" if choice.agent else "defaults"
        agent = f"{name} ({choice.reason})"
        memory, recall_note = _replay_memory(memory_factory, choice.options(), choice.memory_name)
        rows = ReplaySource(store).preload(thread_id)
        turns = memory.turns(thread_id, source=rows)  # (from the same read: a long thread is decoded once)
        start = len(turns) - 1 if turns else 0
        if message_id is not None:
            found = store.memory.get_messages([message_id])
            when = found[0].created_at if found and found[0].thread_id == thread_id else None
            if when is None:
                raise LookupError(f"Message {message_id} is not in thread {thread_id} any more.")
            start = turn_index_for(turns, message_id, when)
        return cls(store, memory, choice.thread, turns, agent, start, rows, recall_note, agent_name=name)

    # -- rebuilding --------------------------------------------------------------------------------
    def prompt(self, index: int, mode: str = "record") -> AssembledPrompt:
        turn = self.turns[index]
        key = (turn.input_message_id, mode)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        prompt = self.rebuild(turn.input_message_id, mode)
        with self._lock:
            self._cache[key] = prompt
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return prompt

    def rebuild(self, input_message_id: str, mode: str = "record",
                options: Mapping[str, Any] | None = None) -> AssembledPrompt:
        """``memory.assemble(as_of=...)`` over the thread's cached rows."""
        with self._rebuilding:
            return rebuild(self.memory.assembler, as_of=input_message_id, thread_id=self.thread_id,
                           resource_id=self.thread.resource_id, options=options, rebuild=mode,  # type: ignore[arg-type]
                           source=self.rows)

    def step(self, index: int) -> StepData:
        turn = self.turns[index]
        received = self.prompt(index, "record")
        now = self.prompt(index, "now")
        previous = self.prompt(index - 1, "record") if index > 0 else None
        changes = with_left_input_ids(prompt_diff(previous, received), input_ids(self.turns[index - 1])) \
            if previous is not None else []
        now_changes = [] if messages_hash(received.messages) == messages_hash(now.messages) and \
            received.tools == now.tools else prompt_diff(received, now)
        with self._rebuilding:
            found = self.rows.messages(turn.response_ids)
        reply = [found[i] for i in turn.response_ids if i in found]
        step = StepData(index, turn, received, now, changes, now_changes, reply,
                        self._wm_label(received), self._om_label(received), index - 1 if index > 0 else None)
        tokenizer = self.memory.tokenizer
        step.requests = [call_view(received, tokenizer, k) for k in range(len(step.calls))]
        recall_index = self.memory.recall_index
        step.recall_model_now = recall_index.model_id if recall_index is not None else None
        calls = step.calls
        step.call_changes = [changes] + [prompt_diff(calls[k - 1], calls[k]) for k in range(1, len(calls))]
        return step

    def _wm_label(self, prompt: AssembledPrompt) -> str:
        record = prompt.replay.record if prompt.replay is not None else None
        opts = record.memory_options() if record is not None else self.memory.effective_options()
        wm = opts.working_memory
        if not wm.enabled:
            return "off"
        if record is not None:
            if record.wm_version_id is not None:
                return self._version_label(wm.scope, record, record.wm_version_id)
            if record.wm_text is not None:
                return f"{wm.scope} scope · not versioned (the record keeps the text)"
            return f"{wm.scope} scope · empty"
        as_of = (prompt.notes.get("working-memory") or {}).get("asOf")
        return f"{wm.scope} scope · {as_of}" if as_of else f"{wm.scope} scope"

    def _version_label(self, scope: str, record: TurnRecord, version_id: int) -> str:
        owner = record.thread_id if scope == "thread" else (record.resource_id or self.thread.resource_id)
        key = (scope, owner)
        versions = self._versions.get(key)
        if versions is None:
            versions = list(reversed(WorkingMemoryService(self.store).versions(scope, owner)))  # oldest first
            self._versions[key] = versions
        for number, v in enumerate(versions, start=1):
            if v.id == version_id:
                when = format_datetime(v.created_at)
                return f"{scope} scope · version {number} of {len(versions)} (saved {when} by {v.author})"
        return f"{scope} scope · version row {version_id} (no longer stored)"

    def _om_label(self, prompt: AssembledPrompt) -> str:
        record = prompt.replay.record if prompt.replay is not None else None
        opts = record.memory_options() if record is not None else self.memory.effective_options()
        if not opts.observational_memory.enabled:
            return "off"
        notes = prompt.notes.get("observational-memory") or {}
        generation = notes.get("generation")
        row = record.om_generation if record is not None else notes.get("recordId")
        if not row:
            return "none yet (nothing observed before this turn)"
        cursor = record.om_cursor if record is not None else notes.get("cursor")
        gen = f"generation {generation}" if generation is not None else "generation"
        chunks = f" · {record.om_chunks} chunk(s)" if record is not None and record.om_chunks is not None else ""
        # (the cursor is "<ISO time> <message id>": the time shown as every date is, ``format_datetime``)
        seen = f" · observed up to {format_datetime(cursor.split(' ')[0])}" if cursor else ""
        activity = self._om_activity(opts, record)
        return f"{gen} (row {short_id(row)}){chunks}{seen}" + (f" · at this turn: {activity}" if activity else "")

    def _om_activity(self, opts: Any, record: TurnRecord | None) -> str:
        """What background buffering did at this turn (activation, a turn that waited), from the
        events the observational-memory rows keep, matched by the turn's clock reading."""
        if record is None:
            return ""
        from core.observational import load_history
        from core.timeutil import to_iso
        from studio.logic.om_buffer_layout import turn_activity

        scope = opts.observational_memory.scope
        history = load_history(self.store, thread_id=self.thread.id, resource_id=self.thread.resource_id,
                               scope=scope)
        return turn_activity(history, to_iso(record.created_at))

    # -- what-if -----------------------------------------------------------------------------------
    def what_if(self, options: Mapping[str, Any], progress: Callable[[int, int], None] | None = None,
                cancel: Callable[[], bool] | None = None, against: Against = "options") -> WhatIfOutcome:
        """Every turn under ``options`` (``against="today"``: with the memory as it is now), against the real one."""
        rows = list(self.memory.what_if(self.thread_id, options=options, resource_id=self.thread.resource_id,
                                        progress=progress, cancel=cancel, against=against))
        return WhatIfOutcome(rows, len(self.turns), len(rows) < len(self.turns), against)

    def what_if_turn(self, index: int, options: Mapping[str, Any], against: Against = "options") -> WhatIfDetail:
        if against == "today" and not options:
            return self.today(index)
        turn = self.turns[index]
        real = self.prompt(index, "record")
        alt = self.rebuild(turn.input_message_id, "today" if against == "today" else "record", options or None)
        return WhatIfDetail(index, real, alt, prompt_diff(real, alt), against)

    def today(self, index: int) -> WhatIfDetail:
        """Turn ``index`` as its model received it beside the same turn rebuilt with the memory as it is now
        (``rebuild="today"``: today's working memory, messages as stored now, today's configuration), and
        the fragments that differ with their reasons: what Re-Run's "With the memory as it is now" sends.
        Never cached: a working-memory edit since (which does not make the pane read the thread again)
        shows at once."""
        real = self.prompt(index, "record")
        today = self.rebuild(self.turns[index].input_message_id, "today")
        return WhatIfDetail(index, real, today, prompt_diff(real, today), "today")

    # -- fork and re-run ---------------------------------------------------------------------------
    def fork(self, index: int, title: str, working_memory: str) -> Thread:
        """A new thread with the messages before turn ``index`` (the pane checks writability first)."""
        return self.memory.fork_thread(self.thread_id, at=self.turns[index].input_message_id, title=title,
                                       working_memory=working_memory, resource_id=self.thread.resource_id)


def rerun_prompt(prompt: AssembledPrompt, choice: "ModelChoice", model_settings: Mapping[str, Any] | None = None,
                 tool_choice: Any = KEEP, call: int = 0, settings: Mapping[str, Any] | None = None) -> RerunResult:
    """Send model call ``call`` of a rebuilt (or what-if) turn to the chosen model: the recorded request,
    with the settings (``settings``: all of them, as edited) and tool choice the user changed. Never writes."""
    model = choice.build()
    try:
        return rerun(prompt, model, model_settings=model_settings, tool_choice=tool_choice, call=call,
                     settings=settings)
    finally:
        close = getattr(model, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True)
class TodayRerun:
    """A re-run "with the memory as it is now": the turn rebuilt at the moment it was sent, and the reply."""

    detail: WhatIfDetail
    result: RerunResult


def rerun_today(source: ReplayThread, index: int, choice: "ModelChoice", tool_choice: Any = KEEP, call: int = 0,
                settings: Mapping[str, Any] | None = None) -> TodayRerun:
    """Rebuild turn ``index`` with the memory as it is now (``ReplayThread.today``, so an edit made since the
    panel showed it is in) and send model call ``call`` of it through ``rerun_prompt``. Never writes."""
    detail = source.today(index)
    return TodayRerun(detail, rerun_prompt(detail.what_if, choice, tool_choice=tool_choice, call=call,
                                           settings=settings))


# -- the turn's trace -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceMatch:
    trace_id: str | None
    note: str


def find_trace(reader: Any, turns: Sequence[Turn], index: int, thread_id: str) -> TraceMatch:
    """The trace of turn ``index``: the run of this thread with a model call whose request the record
    names (``requestHash``; a record without calls: the hash of its messages); without a record, one
    whose last user message is the turn's text. Candidates
    are tried nearest to the turn's position among the thread's runs first, so this usually opens one
    or two traces."""
    if reader is None:
        return TraceMatch(None, "There is no trace file beside this database (tracing was off or it was deleted).")
    listed = reader.list_traces(limit=max(200, 2 * len(turns)), filters=TraceFilters(thread_id=thread_id))
    if listed.busy and not listed:
        return TraceMatch(None, "The trace file is busy; try again in a moment.")
    runs = sorted((t for t in listed if t.span_type == "agent_run"), key=lambda t: t.started_at)
    if not runs:
        return TraceMatch(None, "No trace of this thread is stored (tracing was off, or the traces were pruned).")
    turn = turns[index]
    record = turn.record
    guess = min(index + max(len(runs) - len(turns), 0), len(runs) - 1)
    for i in sorted(range(len(runs)), key=lambda i: abs(i - guess)):
        spans = reader.get_trace(runs[i].trace_id)
        if _is_turn(spans, turn, record):
            return TraceMatch(runs[i].trace_id, "")
    return TraceMatch(None, "None of this thread's stored traces is this turn's (its trace was pruned).")


def _is_turn(spans: Sequence[Any], turn: Turn, record: TurnRecord | None) -> bool:
    # Any model call of the run may be the turn's (an observer's call can come first).
    sent = {c.body_hash for c in record.calls} if record is not None else set()
    for span in spans:
        if span.span_type != "model_generation" or not isinstance(span.input, dict):
            continue
        if sent:
            attributes = span.attributes if isinstance(span.attributes, dict) else {}
            if attributes.get("requestHash") in sent:
                return True
            continue
        messages = span.input.get("messages")
        if not isinstance(messages, list):
            continue
        if record is not None:
            if record.sent_messages(messages):
                return True
            continue
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if users and str(users[-1].get("content") or "") == turn.input_text:
            return True
    return False
