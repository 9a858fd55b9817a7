"""Every read the Studio runs on worker threads, one section per pane. Store in, plain data out.

Panes hold widgets only: they hand these functions to ``session.run`` and paint the result on the UI
thread. Everything here reads (looking never writes) through the engine's own stores and services;
there is no SQL here. Pure shaping of the results lives in ``studio/logic``; the Qt item models in
``studio/models``. No Qt import (checked by a test).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from studio.logic.message_format import MessageRow, search_text, summarize, unreadable_row
from studio.selection import Selection

# The engine's modules load in the function that needs them, on the worker that runs it: importing
# this module (the panes do, before the window's first paint) loads neither SQLAlchemy, numpy, DuckDB
# nor the tokenizer. The names below are for the type checker only.
if TYPE_CHECKING:  # pragma: no cover
    from core import AssembledPrompt, Memory, Store
    from core.messages import Message
    from core.context_window import PromptBudget
    from core.observational import OMRecord, ThreadHints
    from core.recall import RecallIndex
    from core.recall.explain import Explanation, Inspection
    from core.storage.memory_store import ResourceSummary, ThreadSummary
    from core.storage.message_pages import UnreadableMessage
    from core.traces.home import TraceKind
    from core.traces.reader import SpanReader
    from core.traces.spans import ModelUsage, ReadCount, ReadResult, TraceFilters, TraceSummary
    from studio.logic.memory_config import ConfigState
    from studio.logic.observations_layout import LogText, Lookup
    from studio.logic.prompt_layout import EmbedderHolder, MemoryFactory, Preview, PreviewRequest, TurnRef
    from studio.logic.recall_layout import RecallRequest
    from studio.logic.wm_editing import WmSnapshot


# -- resources and threads (tree) -----------------------------------------------------------------


@dataclass(frozen=True)
class TreeData:
    resources: list[ResourceSummary]
    threads: dict[str, list[ThreadSummary]]  # resource id -> its threads
    # The delegations Mastra wrote (``<resource>-<agent>``) that the stored tool results prove, resource id ->
    # (the resource that delegated, the sub-agent): labelled as delegations (``thread_labels.resource_label``).
    delegations: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def load_tree(store: Store) -> TreeData:
    from core.delegation_results import mastra_delegations

    resources, summaries = store.memory.tree_summaries(openings=True)  # (untitled threads' first words)
    threads: dict[str, list[ThreadSummary]] = {}
    for summary in summaries:
        threads.setdefault(summary.thread.resource_id, []).append(summary)
    proven = mastra_delegations(store, {rid: [s.thread.id for s in listed] for rid, listed in threads.items()})
    return TreeData(resources, threads, proven)


# -- messages ---------------------------------------------------------------------------------------
def load_page(store: Store, thread_id: str, offset: int, limit: int) -> list[MessageRow]:
    """Rows ``offset``..``offset+limit`` of the message view (the store's viewer order); a message that
    was edited since it was stored is marked."""
    return _rows(store, store.memory.browse_messages(thread_id, offset, limit))


def load_newest(store: Store, thread_id: str, limit: int) -> tuple[int, list[MessageRow]]:
    """The thread's message count and its newest ``limit`` rows (oldest first): what the message view
    shows when a thread opens, read with a keyset query from the end of the thread's index."""
    page = store.memory.browse_newest(thread_id, limit)
    return page.total, _rows(store, page.messages)


def _rows(store: Store, messages: list[Message | UnreadableMessage]) -> list[MessageRow]:
    from core.edits.messages import changed_ids

    rows = [_row(m) for m in messages]
    edited = changed_ids(store, [r.id for r in rows])
    return [replace(r, edited=True) if r.id in edited else r for r in rows]


def _row(m: Message | UnreadableMessage) -> MessageRow:
    from core.storage.message_pages import UnreadableMessage

    if isinstance(m, UnreadableMessage):  # shown in its place, so it never hides its neighbours
        return unreadable_row(m.id, m.role, m.created_at, m.error)
    return summarize(m)


def count_messages(store: Store, thread_id: str) -> int:
    return store.memory.count_messages(thread_id)


@dataclass(frozen=True)
class MessageLocation:
    message_id: str
    thread_id: str
    resource_id: str | None


def message_location(store: Store, message_id: str) -> MessageLocation | None:
    """Which thread (and resource) a stored message is in, or None if it is gone: a link to a message
    (a recall hit from another thread) opens its own thread, not the one on screen."""
    found = store.memory.get_messages([message_id])
    if not found or not found[0].thread_id:
        return None
    msg = found[0]
    resource = msg.resource_id
    if not resource:
        thread = store.memory.get_thread(msg.thread_id or "")
        resource = thread.resource_id if thread else None
    return MessageLocation(msg.id, msg.thread_id or "", resource)


def message_position(store: Store, thread_id: str, message_id: str) -> int | None:
    """The row index of a message in the message view, or None if it is gone."""
    return store.memory.message_position(thread_id, message_id)


# -- search (resources pane) ------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchHit:
    message_id: str
    thread_id: str
    resource_id: str
    thread_title: str
    role: str
    text: str
    created_at: Any


SEARCH_PAGE = 1_000  # stored messages read at a time, newest first, while looking for hits
SEARCH_SCAN_LIMIT = 50_000  # at most this many are read for one search (the newest); the answer says so


@dataclass(frozen=True)
class SearchFound:
    """A search's hits, and whether every message that could hold the text was looked at: a search of a
    word that every stored message's JSON holds ("type", "text") reads the newest ``SEARCH_SCAN_LIMIT``
    and says so (``searched``: how many were read; ``complete`` False: older ones were not)."""

    hits: list[SearchHit]
    searched: int
    complete: bool
    limit: int = 200  # hits asked for: as many found means newer ones, not all


def search_messages(store: Store, text: str, limit: int = 200) -> SearchFound:
    """Messages whose text contains ``text`` (case-insensitive), newest first. The storage matches the
    stored JSON, where every message holds "format", "parts", "type", "text", quotes and braces: its
    candidates are kept only when what the message says contains the query, and more are read, page
    by page, until ``limit`` are found or every candidate was read (at most ``SEARCH_SCAN_LIMIT``)."""
    query = text.strip()
    wanted = query.casefold()
    found: list[Message] = []
    searched, complete = 0, True
    pages = store.memory.search_text_pages(query, page=SEARCH_PAGE)
    try:
        for page in pages:
            searched += page.rows
            found.extend(m for m in page.messages if wanted in search_text(m).casefold())
            if len(found) >= limit:
                break
            if searched >= SEARCH_SCAN_LIMIT:
                complete = next(pages, None) is None  # (cut here, unless that was the last candidate)
                break
    finally:
        pages.close()
    hits = found[:limit]
    titles: dict[str, tuple[str, str]] = {}
    out = []
    for m in hits:
        tid = m.thread_id or ""
        if tid not in titles:
            thread = store.memory.get_thread(tid)
            titles[tid] = (thread.title, thread.resource_id) if thread else ("", m.resource_id or "")
        title, resource = titles[tid]
        body = summarize(m).preview
        out.append(SearchHit(m.id, tid, resource, title, m.role, body, m.created_at))
    return SearchFound(out, searched, complete, limit)


def search_summary(query: str, found: SearchFound) -> str:
    """The line above a search's results: how many."""
    n = len(found.hits)
    return (f"The newest {n} messages that contain “{query}”" if n >= found.limit else
            f"{n:,} message{'s' if n != 1 else ''} contain{'s' if n == 1 else ''} “{query}”" if n else
            f"No message contains “{query}”")


def search_note(found: SearchFound) -> str:
    """What a search did not look at ("" when it looked at every message that could hold the text)."""
    if found.complete:
        return ""
    return (f"Searched the newest {found.searched:,} messages that might hold it; older ones were not searched. "
            "A longer query narrows the search.")


# -- recall playground -----------------------------------------------------------------------------
@dataclass
class RecallView:
    """One playground search: the engine's inspection, and the one way forward when recall cannot answer."""

    request: RecallRequest
    inspection: Inspection
    problem: str | None = None
    # vectors per embedding model in the whole database (None: written without a model id, by Mastra)
    indexed_by: dict[str | None, int] = field(default_factory=dict)
    # messages with piece vectors per embedding model (``core.recall.pieces``)
    with_pieces: dict[str, int] = field(default_factory=dict)
    # Candidates the search left out as gone that are still stored, as rows that cannot be read: id -> why.
    unreadable: dict[str, str] = field(default_factory=dict)
    migrated: bool = True  # the recall tables are there (else Migrate first: nothing can be indexed yet)


def recall_index(store: Store, embedders: EmbedderHolder) -> RecallIndex:
    """The store's recall index for the playground's embedder (built once per store and model)."""
    from core.recall import RecallIndex

    return RecallIndex.for_store(store, embedders.get(store))


def inspect_recall(store: Store, embedders: EmbedderHolder, req: RecallRequest) -> RecallView:
    from core.recall.explain import inspect_search
    from core.recall.models import stored_models, stored_piece_counts
    from studio.logic.recall_layout import index_problem

    index = recall_index(store, embedders)
    resource_id, thread_id = req.search_scope()
    ins = inspect_search(index, req.query, resource_id=resource_id, thread_id=thread_id, top_k=req.top_k,
                         threshold=req.threshold, before=req.before, after=req.after)
    problem = index_problem(migrated=index.migrated, has_vectors=index.info is not None, model_id=index.model_id,
                            location=store.location.display)
    unreadable = _unreadable_candidates(store, ins)
    return RecallView(req, ins, problem, dict(stored_models(store)), unreadable=unreadable,
                      with_pieces=dict(stored_piece_counts(store)), migrated=index.migrated)


def _unreadable_candidates(store: Store, ins: Inspection) -> dict[str, str]:
    """The candidates the search left out as deleted that are still stored, as rows that do not parse.

    The search cannot tell them from deleted ones (it reads no message it cannot parse); the playground
    says what they are, so nobody looks for a deletion that never happened. Their rows read here show
    in the lists in their place (``ins.messages``), with the reason."""
    from core.recall.explain import Shown
    from studio.logic.recall_layout import unreadable_note, unreadable_text

    gone = list(dict.fromkeys(c.message_id for cands in ins.lists.values() for c in cands
                              if c.status == "deleted" and c.message_id not in ins.messages))
    if not gone:
        return {}
    rows = store.memory.get_messages(gone).unreadable
    for row in rows:
        ins.messages[row.id] = Shown(row.id, row.thread_id, row.role, row.created_at, unreadable_text(row.error))
    if rows:
        ins.notes.append(unreadable_note([row.id for row in rows]))
    return {row.id: row.error for row in rows}


def explain_recall(store: Store, embedders: EmbedderHolder, ins: Inspection, message_id: str) -> Explanation:
    from core.recall.explain import Shown, explain_message
    from studio.logic.recall_layout import UNREADABLE_VERDICT, unreadable_summary, unreadable_text

    explanation = explain_message(recall_index(store, embedders), message_id.strip(), ins)
    if explanation.verdict == "deleted" and explanation.message_id:
        # "Deleted" is what the search sees of a row it cannot parse: say that the row is stored.
        rows = store.memory.get_messages([explanation.message_id]).unreadable
        if rows:
            row = rows[0]
            explanation.verdict = UNREADABLE_VERDICT
            explanation.summary = unreadable_summary(row.id, row.error)
            explanation.message = Shown(row.id, row.thread_id, row.role, row.created_at, unreadable_text(row.error))
    return explanation


def last_messages(store: Store, thread_id: str, limit: int = 500) -> list[MessageRow]:
    """The newest ``limit`` messages of a thread, oldest first (pickers and the chat transcript)."""
    total = store.memory.count_messages(thread_id)
    return load_page(store, thread_id, max(0, total - limit), limit)


# -- prompt inspector -------------------------------------------------------------------------------
# Which agent's options a thread starts from: ``core.agent_configs.agent_for_thread`` (the CLI's rule too).

def resolve_turn(store: Store, thread_id: str, message_id: str) -> TurnRef | None:
    """The turn a picked message belongs to: itself if it is a user message, else the user message
    that started it (the newest user message before it)."""
    from core.storage.memory_store import MessageQuery
    from core.timeutil import to_iso
    from studio.logic.prompt_layout import TurnRef

    found = store.memory.get_messages([message_id])
    if not found or found[0].thread_id != thread_id:
        return None
    picked = found[0]
    if picked.role in ("user", "signal"):
        return TurnRef(picked.id, picked, (picked.created_at, picked.id), to_iso(picked.created_at))
    earlier = store.memory.list_messages(
        MessageQuery(thread_id=thread_id, before=(picked.created_at, picked.id), last=200)
    )
    for msg in reversed(earlier):
        if msg.role in ("user", "signal"):
            return TurnRef(picked.id, msg, (msg.created_at, msg.id), to_iso(msg.created_at))
    return TurnRef(picked.id, None, (picked.created_at, picked.id), to_iso(picked.created_at))


def assemble_preview(store: Store, req: PreviewRequest, memory_factory: MemoryFactory,
                     embedders: EmbedderHolder) -> Preview:
    """Build the Memory the agent would run with and ask it for the prompt (reads only: a preview)."""
    from core.messages import Message
    from studio.logic.prompt_layout import Preview, memory_options_for
    from studio.logic.request_layout import call_view, observer_call_view

    notes: list[str] = []
    notice: str | None = None
    embedder = embedders.get(store) if req.options.recall else None
    memory = memory_factory(memory_options_for(req), req.memory_name, embedder)
    overrides = req.options.to_overrides()
    turn = None
    if req.message_id and req.thread_id:
        turn = resolve_turn(store, req.thread_id, req.message_id)
        if turn is None:
            raise LookupError(f"Message {req.message_id} is not in thread {req.thread_id} any more.")
        prompt = assemble_as_of(memory, req, turn, overrides)
        as_of = prompt.notes.get("working-memory", {}).get("asOf")
        if as_of:
            notes.append(f"History and recall end at this turn; working memory: {as_of}.")
    else:
        inputs = [Message.user(req.text)] if req.text.strip() else []
        budget = recorded_budget(store, req.thread_id) if req.thread_id else None
        prompt = memory.assemble(
            thread_id=req.thread_id, resource_id=req.resource_id, input=inputs,
            instructions=req.instructions or None, options=overrides, budget=budget,
        )
        if budget is not None:
            notes.append(f"Fitted into the {budget.context_window:,}-token context window of {budget.model_id}, "
                         f"as this thread's last recorded turn was ({budget.reply_tokens:,} tokens kept for the "
                         f"reply: {budget.reply_source}); the next turn on that model is fitted the same way.")
        from studio.logic.om_buffer_layout import next_turn_notice, prompt_buffer_note

        notice = next_turn_notice(prompt)
        buffering = prompt_buffer_note(prompt.notes)
        if buffering:
            notes.append(buffering)
    model, model_note = thread_model(store, req.thread_id) if req.thread_id else (None, "")
    calls = len(prompt.replay.calls) if prompt.replay is not None and prompt.replay.calls else 1
    requests = [call_view(prompt, memory.tokenizer, k) for k in range(calls)]  # token counts: on this worker
    observer = observer_call_view(prompt) if turn is None else None  # (after the model calls: not one of them)
    if observer is not None:
        requests.append(observer)
    return Preview(req, prompt, turn, notes, model, model_note, requests, notice)


MODEL_LOOKBACK = 50  # newest messages searched for a reply that names its model


def recorded_budget(store: Store, thread_id: str) -> "PromptBudget | None":
    """The context window the thread's newest recorded turn was fitted into, with its reply cap
    (``max_tokens`` of its first call): a new message's preview is fitted the same way, as the next turn
    on that model would be. None when no recorded turn of the thread had a window."""
    from core.replay import store as records

    record = records.newest_windowed(store, thread_id)
    return record.budget() if record is not None else None


def thread_model(store: Store, thread_id: str) -> tuple[str | None, str]:
    """The model the thread's newest reply records (``metadata.modelId``, or a step's ``model``),
    and where that came from: the model whose context window the prompt is measured against."""
    from core.storage.memory_store import MessageQuery

    recent = store.memory.list_messages(MessageQuery(thread_id=thread_id, last=MODEL_LOOKBACK))
    for msg in reversed(recent):
        if msg.role != "assistant":
            continue
        named = msg.metadata.get("modelId") or next(
            (p.get("model") for p in msg.parts if p.get("type") == "step-start" and p.get("model")), None)
        if named:
            return str(named), "the model of this thread's last reply"
    return None, "no reply in this thread names its model; the size is the context_window option"


def assemble_as_of(memory: Memory, req: PreviewRequest, turn: TurnRef, overrides: Mapping[str, Any]) -> AssembledPrompt:
    """The engine rebuilds the turn itself (``as_of``): history and recall end before that message.
    With the agent's own options (``req.as_recorded``) a recorded turn rebuilds exactly as sent;
    changed options make a what-if over it."""
    return memory.assemble(
        thread_id=req.thread_id, resource_id=req.resource_id, instructions=req.instructions or None,
        options=None if req.as_recorded else overrides, as_of=turn.as_of,
    )


# -- working memory ---------------------------------------------------------------------------------
def load_wm(store: Store, selection: Selection, agent_name: str | None = None) -> WmSnapshot:
    """The agent configs, the effective template/schema, the stored value and its versions.

    The effective options come from ``core.agent_configs.effective_options_for``: the newest Studio
    override applied exactly as the agent applies it, without building a ``Memory``.
    """
    from core import MemoryOptions
    from core.agent_configs import DEFAULT_MEMORY_NAME, agent_for_thread, effective_options_for
    from core.storage import schema as tables
    from core.tokens import default_tokenizer
    from core.working_memory import WorkingMemoryService
    from studio.logic.wm_editing import WmSnapshot, target_for

    choice = agent_for_thread(store, selection.thread_id)
    thread = choice.thread
    if selection.resource_id is None and thread is not None:
        selection = Selection(thread.resource_id, selection.thread_id, selection.message_id)
    agent, reason = choice.agent, choice.reason
    if agent_name is not None:
        agent = next((a for a in choice.agents if a.name == agent_name), None)
        reason = f"chosen: agent '{agent_name}'" if agent else "chosen: defaults"
    base = agent.memory_options() if agent is not None else MemoryOptions(working_memory={"enabled": True})
    declared = bool(base.working_memory.enabled)
    if not declared:  # shown (and editable) even when this agent keeps none
        base = base.merged({"working_memory": {"enabled": True}})
    service = WorkingMemoryService(store)
    scope_note = ""
    if agent is None and thread is not None and base.working_memory.scope == "resource" \
            and _thread_keeps_wm(thread.metadata):
        # No registered configuration says which scope applies, and the defaults' resource scope would hide
        # the working memory this thread keeps itself (Mastra's scope "thread" keeps it in the thread's
        # metadata): show the thread's, and say so. Only the read changes; nothing is written.
        base = base.merged({"working_memory": {"scope": "thread"}})
        scope_note = THREAD_SCOPE_NOTE
        if service.get(MemoryOptions(working_memory={"enabled": True}).working_memory, thread_id=thread.id,
                       resource_id=thread.resource_id).text is not None:
            scope_note += f" Resource '{thread.resource_id}' keeps one too: pick the resource itself to see it."
    memory_name = agent.memory_name if agent is not None else DEFAULT_MEMORY_NAME
    opts = effective_options_for(store, memory_name, base).working_memory
    target, why = target_for(selection, opts)
    snap = WmSnapshot(choice.agents, agent, reason, memory_name, declared, opts, target, why,
                      config=config_state(store, memory_name),
                      history_available=store.db.has_table(tables.wm_versions.name),
                      max_bytes=base.max_working_memory_bytes, versions_kept=base.max_working_memory_versions,
                      scope_note=scope_note)
    if target is not None:
        snap.text = service.get(opts, thread_id=target.thread_id, resource_id=target.resource_id).text
        snap.versions = service.versions(target.scope, target.owner_id)
        tokenizer = default_tokenizer()  # loaded here, off the UI thread, before the editor counts live
        snap.tokens = tokenizer.count(snap.text or "")
        snap.version_tokens = {v.id: tokenizer.count(v.text or "") for v in snap.versions}
    return snap


THREAD_SCOPE_NOTE = ("Showing this thread's own working memory (thread scope): it is kept in the thread, "
                     "as Mastra keeps it with scope 'thread', and no registered agent says which scope applies.")


def _thread_keeps_wm(metadata: Any) -> bool:
    """Whether a thread's metadata holds a working memory (Mastra's thread scope: ``workingMemory``)."""
    value = metadata.get("workingMemory") if isinstance(metadata, dict) else None
    return value is not None and value != ""


def config_state(store: Store, name: str) -> ConfigState:
    """The template/schema override history of memory ``name`` for the override editor."""
    from core.agent_configs import config_versions
    from studio.logic.memory_config import ConfigState

    versions = config_versions(store, name)
    return ConfigState(name, versions or [], available=versions is not None)


# -- observations -----------------------------------------------------------------------------------
@dataclass
class OMView:
    selection: Selection
    lookup: Lookup | None = None
    history: list[OMRecord] = field(default_factory=list)
    hints: ThreadHints = field(default_factory=lambda: _thread_hints())
    # A resource-scoped log names the threads its observations came from: their titles, by id.
    thread_titles: dict[str, str] = field(default_factory=dict)
    # Each generation's log as shown (paragraphs, and the current one's lines), by record id: made here,
    # on the worker, since a log of thousands of observations took ~50 ms to take apart.
    texts: dict[str, LogText] = field(default_factory=dict)


def _thread_hints() -> ThreadHints:
    """No hints (a thread without any): ``OMView``'s default, built when a view is."""
    from core.observational import ThreadHints

    return ThreadHints()


def load_observations(store: Store, selection: Selection) -> OMView:
    """The first lookup with a record wins (a thread's own record, else its resource's)."""
    from core.observational import load_history, thread_hints
    from studio.logic.observations_layout import log_texts, lookups_for

    view = OMView(selection)
    if selection.thread_id:
        thread = store.memory.get_thread(selection.thread_id)
        if thread is not None:
            view.hints = thread_hints(thread.metadata)
    for lookup in lookups_for(selection):
        history = load_history(store, thread_id=lookup.thread_id, resource_id=lookup.resource_id,
                               scope=lookup.scope)
        if history:
            view.lookup, view.history = lookup, history
            break
    if view.lookup is not None and view.lookup.scope == "resource" and view.lookup.resource_id:
        threads = store.memory.list_threads(resource_id=view.lookup.resource_id, per_page=None).threads
        view.thread_titles = {t.id: t.title for t in threads if t.title}
    view.texts = log_texts(view.history, view.thread_titles)
    return view


# -- traces -----------------------------------------------------------------------------------------
if TYPE_CHECKING:  # pragma: no cover
    TraceSourceKind = TraceKind


@dataclass(frozen=True)
class TraceSource:
    kind: TraceSourceKind
    location: str
    reader: SpanReader | None
    # Files whose stat() changing means "read again"; or, with no file (Postgres), a cheap query
    # whose answer changing means the same.
    watch: tuple[Path | Callable[[], Any], ...]


class SourceResolver:
    """Finds the trace store for a session's database; keeps one reader per file so a reader's
    last good answer (what it returns while the file is busy) survives between polls."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._readers: dict[tuple[str, str], SpanReader] = {}
        self._lock = threading.Lock()

    def _reader(self, kind: str, path: Path) -> SpanReader:
        with self._lock:
            reader = self._readers.get((kind, str(path)))
            if reader is None:
                if kind == "duckdb":
                    from core.traces.store import DuckDBObservabilityStore

                    reader = DuckDBObservabilityStore(path, read_only=True)
                else:
                    from core.traces.libsql_reader import LibSQLSpanReader

                    reader = LibSQLSpanReader(path)
                self._readers[(kind, str(path))] = reader
            return reader

    def resolve(self) -> TraceSource:
        """The trace store ``core.traces.home`` names for this database, with what to watch."""
        from core.traces.home import trace_home

        home = trace_home(self.store.location, self.store.db)
        if home.kind == "postgres":
            from core.traces.pg_store import PgSpanStore

            with self._lock:
                reader = self._readers.get(("postgres", home.display))
                if not isinstance(reader, PgSpanStore):
                    reader = PgSpanStore(self.store.db, read_only=True)
                    self._readers[("postgres", home.display)] = reader
            return TraceSource("postgres", home.display, reader, (reader.change_mark,))
        if home.path is None:
            return TraceSource("memory", home.display, None, ())
        watch: tuple[Path | Callable[[], Any], ...] = home.files
        if home.kind == "duckdb":
            from core.traces.live import live_writers

            # A writer dying changes no file of the trace store, only its lease: its running rows must
            # then be read again to say they never finished (a lock probe, no DuckDB open).
            trace_file = home.path
            watch = (*watch, lambda: live_writers(trace_file))
        return TraceSource(home.kind, home.display, self._reader(home.kind, home.path), watch)


def traces_fingerprint(paths: tuple[Path | Callable[[], Any], ...]) -> tuple[Any, ...]:
    """Cheap change detection without opening (or locking) anything; a probe is asked instead."""
    out: list[Any] = []
    for path in paths:
        if callable(path):
            out.append(path())
            continue
        try:
            st = path.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


@dataclass
class TracePage:
    source: TraceSource
    rows: ReadResult[TraceSummary]
    total: ReadCount | None
    offset: int
    fingerprint: tuple[Any, ...]
    #: The first page's token usage per model over the whole scope (``load_usage``), read in the same open.
    usage: ReadResult[ModelUsage] | None = None


def load_traces_page(resolver: SourceResolver, filters: TraceFilters, offset: int, limit: int) -> TracePage:
    from core.traces.spans import ReadResult

    source = resolver.resolve()
    stamp = traces_fingerprint(source.watch)  # taken before reading: a write during the read shows next poll
    if source.reader is None:
        return TracePage(source, ReadResult(missing=True), None, offset, stamp)
    reader = source.reader
    usage: ReadResult[ModelUsage] | None = None
    with reader.reading():  # one open of the trace file for the page, its count and (first page) its bill
        rows = reader.list_traces(limit=limit, offset=offset, filters=filters)
        total = reader.count_traces(filters) if not rows.missing else None
        if offset == 0 and not rows.missing:
            usage = reader.usage_by_model(usage_filters(filters))
    return TracePage(source, rows, total, offset, stamp, usage)


def load_usage(resolver: SourceResolver, filters: TraceFilters) -> ReadResult[ModelUsage]:
    """Token usage per model over every run the filters match (the cost line of the traces pane)."""
    from core.traces.spans import ReadResult

    source = resolver.resolve()
    if source.reader is None:
        return ReadResult(missing=True)
    return source.reader.usage_by_model(usage_filters(filters))


def usage_filters(filters: TraceFilters) -> TraceFilters:
    """The name and status filters narrow the list, not the thread's bill."""
    from core.traces.spans import TraceFilters

    return TraceFilters(resource_id=filters.resource_id, thread_id=filters.thread_id)
